# Installing mha: the library, its module interface units, and the package config that
# lets another project write find_package(mha), link mha::mha and `import mha;` (and
# `import mha.io;`, `import mha.golden;`).
#
#   <prefix>/lib/libmha.a
#   <prefix>/include/mha/*.cppm                    the module units (one per layer)
#   <prefix>/include/mha/*/*.hpp, third_party*.hpp  the files they include, and their GMF headers
#   <prefix>/lib/cmake/mha/                         mhaConfig.cmake, version, targets
#   <prefix>/bin/mha-golden                         the golden-case checker
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MHA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/mha" CACHE STRING "Where mhaConfig.cmake is installed")

# Consumers compile the interface units themselves; each includes "third_party.hpp" or one
# of the two shorter lists it is built from,
# found in include/mha (next to the units of mha, on the include path for those in io/ and
# golden/), and consumers include it before `import mha;`.
target_include_directories(mha PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/mha>)

install(TARGETS mha EXPORT mhaTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  FILE_SET CXX_MODULES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mha)
# The files each module unit includes in its purview (platform/, textbook/, ...) and the
# third-party headers of the global module fragments, next to the units as in modules/.
install(DIRECTORY modules/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mha FILES_MATCHING PATTERN "*.hpp")
install(TARGETS mha-golden RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT mhaTargets
  NAMESPACE mha::
  DESTINATION ${MHA_INSTALL_CMAKEDIR}
  CXX_MODULES_DIRECTORY cxx-modules)

configure_package_config_file(cmake/mhaConfig.cmake.in ${PROJECT_BINARY_DIR}/mhaConfig.cmake
  INSTALL_DESTINATION ${MHA_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mhaConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mhaConfig.cmake ${PROJECT_BINARY_DIR}/mhaConfigVersion.cmake
  DESTINATION ${MHA_INSTALL_CMAKEDIR})
