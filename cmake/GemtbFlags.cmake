# Compiler flags that make the oracle bit-exact and keep our own code warning-free.
#
# Bit-exactness: the order and rounding of every floating-point operation must
# be a function of the source alone. So: no FMA contraction, no fast-math, and a pinned ISA level
# (x86-64-v2, no run-time dispatch) so that a golden file made on one x86-64 machine verifies bitwise
# on another. These flags apply to every host translation unit, including model/ and reference/.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(GEMTB_ISA_FLAGS -march=x86-64-v2)
else()
  set(GEMTB_ISA_FLAGS)
endif()
add_compile_options(
  "$<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off;-fno-fast-math;${GEMTB_ISA_FLAGS}>")
# Eigen must never parallelise or pick block sizes from the detected CPU behind our back.
add_compile_definitions(EIGEN_DONT_PARALLELIZE)

# Warnings are errors in gemtb's own targets (not in third-party headers, which come in as SYSTEM).
# -Wno-restrict: GCC 12 at -O3 reports false -Wrestrict overlaps inside std::string's own inlined
# code (GCC bug 105329), which would otherwise fail harmless string assignments.
function(gemtb_target_warnings target)
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wpedantic;-Wshadow;-Wno-unused-parameter;-Wno-restrict;-Werror>"
    "$<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings;-Xcompiler=-Wall,-Wextra,-Werror>")
endfunction()
