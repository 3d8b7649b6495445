# Installs the oracle as a CMake package: find_package(gemtb) then link gemtb::reference to call the
# attention oracle in-process. Headers keep their source-tree paths (model/..., reference/...).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS gemtb_model gemtb_reference EXPORT gemtbTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set_target_properties(gemtb_model PROPERTIES EXPORT_NAME model)
# model/'s compiled parts, when reference/ links them (export names: gemtb::model_desc, ...).
foreach(target gemtb_model_json gemtb_model_desc gemtb_model_sharding gemtb_model_launch)
  if(TARGET ${target})
    string(REPLACE "gemtb_" "" export_name ${target})
    set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
    install(TARGETS ${target} EXPORT gemtbTargets
      ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
      LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  endif()
endforeach()
install(DIRECTORY model reference DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(TARGETS gemtb RUNTIME DESTINATION bin)
# What the binary reads, in the source tree's layout under share/gemtb: bin/gemtb finds it as
# ../share/gemtb (model/description/data_dir.h), so the installed tree can move as a whole.
set(GEMTB_INSTALL_DATA share/gemtb)
install(DIRECTORY model/configs DESTINATION ${GEMTB_INSTALL_DATA}/model)
install(DIRECTORY sim/scenarios sim/calibration DESTINATION ${GEMTB_INSTALL_DATA}/sim)
install(FILES sim/network/default_cluster.json DESTINATION ${GEMTB_INSTALL_DATA}/sim/network)
install(FILES golden/manifest.json DESTINATION ${GEMTB_INSTALL_DATA}/golden)
install(DIRECTORY golden/attention golden/embedding golden/quantize golden/training
  DESTINATION ${GEMTB_INSTALL_DATA}/golden)
install(EXPORT gemtbTargets NAMESPACE gemtb:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gemtb)

file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/gemtbConfig.cmake.in [=[
@PACKAGE_INIT@
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(absl)
find_dependency(TBB)
find_dependency(nlohmann_json)
include("${CMAKE_CURRENT_LIST_DIR}/gemtbTargets.cmake")
check_required_components(gemtb)
]=])
configure_package_config_file(${CMAKE_CURRENT_BINARY_DIR}/gemtbConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/gemtbConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gemtb)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/gemtbConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gemtbConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/gemtbConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gemtb)
