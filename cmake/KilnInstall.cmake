# Install rules and the CMake/pkg-config package of kiln (included last by the top CMakeLists.txt).
#
# Installs (component kiln_library) libkiln, shared or static per BUILD_SHARED_LIBS, the public
# headers, the exported target kiln::kiln (lib/cmake/kiln/kilnTargets.cmake), kilnConfig.cmake with
# its version file, and lib/pkgconfig/kiln.pc. tools/ installs the CLI; this file gives it a RUNPATH
# to the installed libkiln. Everything installed is relocatable: the package files
# find the prefix from their own location, so `cmake --install <build> --prefix <anywhere>` works.
#
# A static libkiln carries its private link dependencies ($<LINK_ONLY:...>) in its interface: every
# target among them (kiln_warnings, kiln_cache_deps when the cache has optional dependencies) is
# exported with it, imported targets they name are recreated by kilnConfig.cmake, and Threads is
# found again with find_dependency.
include(CMakePackageConfigHelpers)

set(KILN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/kiln" CACHE STRING
    "Where kilnConfig.cmake is installed, relative to the prefix")
set(KILN_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig" CACHE STRING
    "Where kiln.pc is installed, relative to the prefix")

get_target_property(_kiln_library_type kiln TYPE)
set(_kiln_export_targets kiln)
set(_kiln_config_dependencies "")
set(_kiln_pc_libs_private "${CMAKE_DL_LIBS}")
list(TRANSFORM _kiln_pc_libs_private PREPEND "-l")
list(APPEND _kiln_pc_libs_private "-pthread" "-lstdc++" "-lm")

# Imported targets a static libkiln's dependencies name must exist in the consumer: recreate them
# from what they resolve to here (system library paths), unless the consumer already has them.
function(_kiln_describe_imported_dependency item out_config out_libs)
  set(config "${${out_config}}")
  set(libs "${${out_libs}}")
  if(item STREQUAL "Threads::Threads")
    # found again by find_dependency(Threads) below
  elseif(TARGET "${item}")
    get_target_property(_imported "${item}" IMPORTED)
    if(_imported)
      get_target_property(_location "${item}" IMPORTED_LOCATION)
      get_target_property(_links "${item}" INTERFACE_LINK_LIBRARIES)
      get_target_property(_type "${item}" TYPE)
      set(_resolved "")
      if(_location)
        list(APPEND _resolved "${_location}")
      endif()
      if(_links)
        list(APPEND _resolved ${_links})
      endif()
      string(APPEND config
        "if(NOT TARGET ${item})\n"
        "  add_library(${item} INTERFACE IMPORTED)\n"
        "  set_target_properties(${item} PROPERTIES INTERFACE_LINK_LIBRARIES \"${_resolved}\")\n"
        "endif()\n")
      foreach(_lib IN LISTS _resolved)
        if(IS_ABSOLUTE "${_lib}")
          list(APPEND libs "${_lib}")
        elseif(NOT TARGET "${_lib}" AND NOT _lib MATCHES "^\\$<")
          list(APPEND libs "-l${_lib}")
        endif()
      endforeach()
    endif()
  elseif(IS_ABSOLUTE "${item}")
    list(APPEND libs "${item}")
  elseif(NOT item MATCHES "^[-$]")
    list(APPEND libs "-l${item}")
  elseif(item MATCHES "^-")
    list(APPEND libs "${item}")
  endif()
  set(${out_config} "${config}" PARENT_SCOPE)
  set(${out_libs} "${libs}" PARENT_SCOPE)
endfunction()

if(TARGET kiln_cache_deps)
  get_target_property(_kiln_cache_links kiln_cache_deps INTERFACE_LINK_LIBRARIES)
  if(_kiln_cache_links)
    foreach(_item IN LISTS _kiln_cache_links)
      _kiln_describe_imported_dependency("${_item}" _kiln_config_dependencies _kiln_pc_libs_private)
    endforeach()
  endif()
endif()

if(_kiln_library_type STREQUAL "STATIC_LIBRARY")
  list(APPEND _kiln_export_targets kiln_warnings)
  if(TARGET kiln_cache_deps)
    list(APPEND _kiln_export_targets kiln_cache_deps)
  endif()
  set(KILN_CONFIG_STATIC TRUE)
else()
  set(KILN_CONFIG_STATIC FALSE)
  set(_kiln_config_dependencies "")  # a shared libkiln hides its dependencies
endif()
set(KILN_CONFIG_DEPENDENCIES "${_kiln_config_dependencies}")
list(REMOVE_DUPLICATES _kiln_pc_libs_private)
list(JOIN _kiln_pc_libs_private " " KILN_PC_LIBS_PRIVATE)

# Components: kiln_library (library, headers, package files) and kiln_cli (tools/: the CLI).
install(TARGETS ${_kiln_export_targets} EXPORT kilnTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT kiln_library
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT kiln_library
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT kiln_library
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")

install(DIRECTORY "${PROJECT_SOURCE_DIR}/engine/include/kiln/" "${PROJECT_SOURCE_DIR}/cache/include/kiln/" "${PROJECT_SOURCE_DIR}/includes/include/kiln/"
  "${PROJECT_SOURCE_DIR}/base/include/kiln/"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/kiln" COMPONENT kiln_library
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")

# A shared libkiln looks for its private shared dependencies (hiredis, when the Redis tier is built)
# next to itself first, then where the system keeps them: a relocated tree that carries copies of them
# (the wheel, scripts/build_wheel.sh) needs none installed. Built with that RUNPATH, so nothing is
# rewritten at install (a padded build RUNPATH would hold empty entries: the working directory); a
# dependency linked from outside the system folders keeps its folder in the RUNPATH, as in the build.
if(_kiln_library_type STREQUAL "SHARED_LIBRARY" AND CMAKE_SYSTEM_NAME STREQUAL "Linux")
  get_target_property(_kiln_library_rpath kiln INSTALL_RPATH)
  if(NOT _kiln_library_rpath)
    set_target_properties(kiln PROPERTIES INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON
      BUILD_WITH_INSTALL_RPATH ON)
  endif()
endif()

# The CLI (tools/ installs it): an installed kiln must find the installed libkiln through its RUNPATH.
if(TARGET kiln_cli AND NOT IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  get_target_property(_kiln_cli_rpath kiln_cli INSTALL_RPATH)
  if(NOT _kiln_cli_rpath)
    file(RELATIVE_PATH _kiln_bin_to_lib "/prefix/${CMAKE_INSTALL_BINDIR}" "/prefix/${CMAKE_INSTALL_LIBDIR}")
    set_target_properties(kiln_cli PROPERTIES INSTALL_RPATH "$ORIGIN/${_kiln_bin_to_lib}")
  endif()
endif()

install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION "${KILN_INSTALL_CMAKEDIR}" FILE kilnTargets.cmake
  COMPONENT kiln_library)

configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/package/kilnConfig.cmake"
  INSTALL_DESTINATION "${KILN_INSTALL_CMAKEDIR}"
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# Pre-1.0: a minor version may break the API.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/package/kilnConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/package/kilnConfig.cmake" "${PROJECT_BINARY_DIR}/package/kilnConfigVersion.cmake"
  DESTINATION "${KILN_INSTALL_CMAKEDIR}" COMPONENT kiln_library)

# pkg-config: the prefix is derived from the .pc file's own directory (${pcfiledir}), so the file
# stays right wherever the tree is installed.
if(IS_ABSOLUTE "${KILN_INSTALL_PKGCONFIGDIR}")
  set(KILN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _kiln_pc_up "/prefix/${KILN_INSTALL_PKGCONFIGDIR}" "/prefix")
  string(REGEX REPLACE "/$" "" _kiln_pc_up "${_kiln_pc_up}")
  set(KILN_PC_PREFIX "\${pcfiledir}/${_kiln_pc_up}")
endif()
foreach(_dir IN ITEMS LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_dir}}")
    set(KILN_PC_${_dir} "${CMAKE_INSTALL_${_dir}}")
  else()
    set(KILN_PC_${_dir} "\${prefix}/${CMAKE_INSTALL_${_dir}}")
  endif()
endforeach()
configure_file("${PROJECT_SOURCE_DIR}/cmake/kiln.pc.in" "${PROJECT_BINARY_DIR}/package/kiln.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/package/kiln.pc" DESTINATION "${KILN_INSTALL_PKGCONFIGDIR}" COMPONENT kiln_library)
