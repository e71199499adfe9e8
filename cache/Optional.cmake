# Optional pieces of the cache, included by cache/CMakeLists.txt.
#
# The Redis remote tier (KILN_REMOTE_CACHE) needs hiredis (Debian: libhiredis-dev). Found: the tier is
# compiled with KILN_HAVE_HIREDIS=1 and the INTERFACE target kiln_cache_deps carries the library to
# whatever links the cache objects (libkiln). Missing or KILN_WITH_HIREDIS=OFF: KILN_HAVE_HIREDIS=0,
# and open_remote() throws an error that says so.
set(KILN_WITH_HIREDIS "auto" CACHE STRING "Build the Redis remote cache tier with hiredis (auto|ON|OFF)")
string(TOUPPER "${KILN_WITH_HIREDIS}" _kiln_hiredis_mode)

set(_kiln_hiredis_found OFF)
if(NOT _kiln_hiredis_mode MATCHES "^(OFF|FALSE|NO|0)$")
  find_path(KILN_HIREDIS_INCLUDE hiredis/hiredis.h)
  find_library(KILN_HIREDIS_LIBRARY NAMES hiredis)
  if(KILN_HIREDIS_INCLUDE AND KILN_HIREDIS_LIBRARY)
    set(_kiln_hiredis_found ON)
  elseif(_kiln_hiredis_mode MATCHES "^(ON|TRUE|YES|1)$")
    message(FATAL_ERROR "KILN_WITH_HIREDIS=ON but hiredis was not found (hiredis/hiredis.h: "
      "${KILN_HIREDIS_INCLUDE}, libhiredis: ${KILN_HIREDIS_LIBRARY}); install libhiredis-dev")
  endif()
endif()

if(_kiln_hiredis_found)
  file(STRINGS "${KILN_HIREDIS_INCLUDE}/hiredis/hiredis.h" _kiln_hiredis_version_lines
    REGEX "^#define HIREDIS_(MAJOR|MINOR|PATCH) ")
  set(_kiln_hiredis_version "")
  foreach(_line IN LISTS _kiln_hiredis_version_lines)
    string(REGEX REPLACE "^#define HIREDIS_[A-Z]+ +([0-9]+).*" "\\1" _part "${_line}")
    string(APPEND _kiln_hiredis_version "${_part}.")
  endforeach()
  string(REGEX REPLACE "\\.$" "" _kiln_hiredis_version "${_kiln_hiredis_version}")

  add_library(kiln_cache_deps INTERFACE)
  target_include_directories(kiln_cache_deps SYSTEM INTERFACE ${KILN_HIREDIS_INCLUDE})
  target_link_libraries(kiln_cache_deps INTERFACE ${KILN_HIREDIS_LIBRARY})
  target_include_directories(kiln_cache SYSTEM PRIVATE ${KILN_HIREDIS_INCLUDE})
  target_compile_definitions(kiln_cache PRIVATE KILN_HAVE_HIREDIS=1)
  set(KILN_REMOTE_STATUS "on (hiredis ${_kiln_hiredis_version}: ${KILN_HIREDIS_LIBRARY})")
else()
  target_compile_definitions(kiln_cache PRIVATE KILN_HAVE_HIREDIS=0)
  if(_kiln_hiredis_mode MATCHES "^(OFF|FALSE|NO|0)$")
    set(KILN_REMOTE_STATUS "off (KILN_WITH_HIREDIS=OFF)")
  else()
    set(KILN_REMOTE_STATUS "compiled out: hiredis not found (install libhiredis-dev)")
  endif()
endif()
set(KILN_REMOTE_STATUS "${KILN_REMOTE_STATUS}" CACHE INTERNAL "Redis remote tier status")
message(STATUS "kiln: remote tier ${KILN_REMOTE_STATUS}")

# The HTTP remote tier (http(s):// in KILN_REMOTE_CACHE) needs libcurl's headers at build time only
# (Debian: libcurl4-openssl-dev): libcurl itself is dlopen()ed ("libcurl.so.4") on the first request of
# such a tier, so libkiln has no link-time dependency on it and runs (locally, with one warning) on a
# machine without it. Headers missing or KILN_WITH_HTTP_REMOTE=OFF: KILN_HAVE_CURL_HEADERS=0 and opening
# an http(s) tier throws an error that says so.
set(KILN_WITH_HTTP_REMOTE "auto" CACHE STRING "Build the HTTP remote cache tier (libcurl headers) (auto|ON|OFF)")
string(TOUPPER "${KILN_WITH_HTTP_REMOTE}" _kiln_http_mode)
set(_kiln_curl_found OFF)
if(NOT _kiln_http_mode MATCHES "^(OFF|FALSE|NO|0)$")
  find_path(KILN_CURL_INCLUDE curl/curl.h)
  if(KILN_CURL_INCLUDE)
    set(_kiln_curl_found ON)
  elseif(_kiln_http_mode MATCHES "^(ON|TRUE|YES|1)$")
    message(FATAL_ERROR "KILN_WITH_HTTP_REMOTE=ON but curl/curl.h was not found; install libcurl4-openssl-dev")
  endif()
endif()
if(_kiln_curl_found)
  target_include_directories(kiln_cache SYSTEM PRIVATE ${KILN_CURL_INCLUDE})
  target_compile_definitions(kiln_cache PRIVATE KILN_HAVE_CURL_HEADERS=1)
  set(KILN_HTTP_REMOTE_STATUS "on (libcurl loaded at run time; headers ${KILN_CURL_INCLUDE})")
else()
  target_compile_definitions(kiln_cache PRIVATE KILN_HAVE_CURL_HEADERS=0)
  set(KILN_HTTP_REMOTE_STATUS "compiled out (no curl/curl.h, or KILN_WITH_HTTP_REMOTE=OFF)")
endif()
message(STATUS "kiln: HTTP remote tier ${KILN_HTTP_REMOTE_STATUS}")
