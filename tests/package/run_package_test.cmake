# Run by the package_consumer test (cmake -P). Steps, each failing the test with its output:
#  1. cmake --install <build> --prefix <work>/prefix   (the library component: lib, headers, package files)
#  2. configure + build consumer/ with CMAKE_PREFIX_PATH=<prefix>; run both of its programs
#  3. pkg-config --cflags --libs kiln (PKG_CONFIG_PATH=<prefix>/lib*/pkgconfig); compile consumer/main.c
#     with those flags and run it
#  4. consumer/engine_only.cpp with those flags: built and run with -std=c++20; with -std=c++17 its first error
#     is kiln/engine.hpp's "needs C++20"
foreach(var BUILD_DIR WORK_DIR CONSUMER_DIR GENERATOR C_COMPILER CXX_COMPILER EXPECTED_VERSION)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_package_test.cmake: ${var} is not set")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "package test: ${what} failed (${result}):\n  ${ARGN}\n${output}")
  endif()
  message(STATUS "package test: ${what}: ok")
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/consumer-build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# 1. Install. Only the library component: the CLI may not be built in a partial build.
run_step("install to ${prefix}" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" --component kiln_library)
foreach(required include/kiln/kiln.h include/kiln/engine.hpp include/kiln/cache/store.hpp)
  if(NOT EXISTS "${prefix}/${required}")
    message(FATAL_ERROR "package test: ${required} was not installed")
  endif()
endforeach()
file(GLOB_RECURSE config_files "${prefix}/*/kilnConfig.cmake")
file(GLOB_RECURSE pc_files "${prefix}/*/kiln.pc")
if(NOT config_files OR NOT pc_files)
  message(FATAL_ERROR "package test: kilnConfig.cmake (${config_files}) or kiln.pc (${pc_files}) missing")
endif()

# 2. The consumer project through find_package(kiln CONFIG).
run_step("configure the consumer" "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${consumer_build}" -G "${GENERATOR}"
  "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DKILN_EXPECTED_VERSION=${EXPECTED_VERSION}" -DCMAKE_BUILD_TYPE=Release)
run_step("build the consumer" "${CMAKE_COMMAND}" --build "${consumer_build}")
run_step("run the C++ consumer" "${consumer_build}/kiln_consumer_cpp")
message(STATUS "${step_output}")
run_step("run the C consumer" "${consumer_build}/kiln_consumer_c")
message(STATUS "${step_output}")

# 3. pkg-config.
if(NOT PKG_CONFIG)
  message(STATUS "package test: no pkg-config: the pkg-config check is skipped")
  return()
endif()
get_filename_component(pc_dir "${pc_files}" DIRECTORY)
set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
run_step("pkg-config --modversion kiln" "${PKG_CONFIG}" --modversion kiln)
string(STRIP "${step_output}" version)
if(NOT version STREQUAL EXPECTED_VERSION)
  message(FATAL_ERROR "package test: kiln.pc says version '${version}', the project is ${EXPECTED_VERSION}")
endif()
# A static libkiln needs its private dependencies too (Libs.private).
get_filename_component(lib_dir "${pc_dir}" DIRECTORY)
set(static_flag "")
if(EXISTS "${lib_dir}/libkiln.a" AND NOT EXISTS "${lib_dir}/libkiln.so")
  set(static_flag --static)
endif()
run_step("pkg-config --cflags --libs ${static_flag} kiln" "${PKG_CONFIG}" --cflags --libs ${static_flag} kiln)
string(STRIP "${step_output}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run_step("compile consumer/main.c with pkg-config's flags" "${C_COMPILER}" -std=c11 -Wall -Wextra -Werror
  "${CONSUMER_DIR}/main.c" -o "${WORK_DIR}/kiln_consumer_pc" ${flags})
string(REGEX MATCH "-L([^;]+)" _ "${flags}")
set(ENV{LD_LIBRARY_PATH} "${CMAKE_MATCH_1}")
run_step("run the pkg-config consumer" "${WORK_DIR}/kiln_consumer_pc")
message(STATUS "${step_output}")

# 4. C++ with pkg-config's flags: kiln/engine.hpp alone brings kiln::Error; with -std=c++20 it builds and runs, and
#    with an older standard the first error says what is needed.
run_step("compile consumer/engine_only.cpp with pkg-config's flags and -std=c++20" "${CXX_COMPILER}" -std=c++20
  -Wall -Wextra -Werror "${CONSUMER_DIR}/engine_only.cpp" -o "${WORK_DIR}/kiln_engine_only" ${flags})
run_step("run it" "${WORK_DIR}/kiln_engine_only")
execute_process(COMMAND "${CXX_COMPILER}" -std=c++17 -fsyntax-only "${CONSUMER_DIR}/engine_only.cpp" ${flags}
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
string(REGEX MATCH "[^\n]*error:[^\n]*" first_error "${output}")
string(FIND "${first_error}" "kiln's C++ API needs C++20" named)
if(result EQUAL 0 OR named EQUAL -1)
  message(FATAL_ERROR "package test: with -std=c++17 kiln/engine.hpp's first error is not that it needs C++20:\n${output}")
endif()
message(STATUS "package test: -std=c++17 stops at \"kiln's C++ API needs C++20\": ok")
