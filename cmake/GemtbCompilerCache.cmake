# Compiler caching: with ccache on PATH, every C++ and CUDA compile goes through it, so a rebuild of
# unchanged sources (a second CI run on the same machine, a fresh clone elsewhere on disk) reads
# objects from the cache instead of compiling them. tools/test.sh, tools/sanitize.sh and
# tools/fuzz.sh set CCACHE_BASEDIR to the checkout so that clones at different paths share entries.
option(GEMTB_CCACHE "Compile through ccache when it is installed" ON)
if(GEMTB_CCACHE)
  find_program(GEMTB_CCACHE_PROGRAM ccache)
  if(GEMTB_CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER ${GEMTB_CCACHE_PROGRAM})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${GEMTB_CCACHE_PROGRAM})
    message(STATUS "gemtb: compiling through ${GEMTB_CCACHE_PROGRAM}")
  endif()
endif()
