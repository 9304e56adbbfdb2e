# SPDX-License-Identifier: Apache-2.0
# install.cmake - what lets engines build against an installed libweightd (pkg-config file, CMake
# package) and the man pages. Included at the end of the top-level CMakeLists.txt, once every
# target exists. Units, snippets and the example config are installed by systemd/CMakeLists.txt
# (weightd.service and weightd.conf at install time, by cmake/install_paths.cmake).
include(CMakePackageConfigHelpers)

# pkg-config: LIBDIR/pkgconfig/libweightd.pc, relocatable: the prefix is found from the file's
# own place (${pcfiledir}), so it stays right for `cmake --install --prefix`, a DESTDIR copied
# elsewhere, or a package. An absolute LIBDIR or INCLUDEDIR is written as it is.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(WD_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  # one ".." for pkgconfig/ and one per component of LIBDIR
  string(REGEX REPLACE "[^/]+" ".." wd_up "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  string(REGEX REPLACE "/+$" "" wd_up "${wd_up}")
  set(WD_PC_PREFIX "\${pcfiledir}/${wd_up}")
endif()
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(WD_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(WD_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
configure_file(${CMAKE_SOURCE_DIR}/client/libweightd.pc.in ${CMAKE_BINARY_DIR}/libweightd.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/libweightd.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# CMake package: find_package(weightd) -> weightd::weightd (shared), weightd::weightd_static.
set(WD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/weightd)
set_target_properties(weightd-client PROPERTIES EXPORT_NAME weightd)
set_target_properties(weightd-client-static PROPERTIES EXPORT_NAME weightd_static)
install(EXPORT weightdTargets NAMESPACE weightd:: FILE weightdTargets.cmake
        DESTINATION ${WD_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/weightdConfig.cmake.in
  ${CMAKE_BINARY_DIR}/weightdConfig.cmake INSTALL_DESTINATION ${WD_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/weightdConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/weightdConfig.cmake ${CMAKE_BINARY_DIR}/weightdConfigVersion.cmake
        DESTINATION ${WD_CMAKE_DIR})

# Man pages: docs/NAME.SECTION -> share/man/manSECTION/NAME.SECTION.
foreach(page weightd.8 weightd.conf.5 weightctl.1 libweightd.3)
  string(REGEX REPLACE "^.*\\.([0-9])$" "\\1" section ${page})
  install(FILES ${CMAKE_SOURCE_DIR}/docs/${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
endforeach()
