// Catch2 runner for the HTTP tier's tests: they need nginx (and python3 for the fault server). Without
// them the run is skipped (77) on a developer's machine, but fails in CI (CI=true), where
// scripts/setup.sh installs both: a missing server must not turn the suite green by skipping it.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "http_server.hpp"
#include "kiln/cache/remote.hpp"

int main(int argc, char** argv) {
  const char* ci = std::getenv("CI");
  const bool in_ci = ci != nullptr && std::string_view(ci) == "true";
  const char* missing = nullptr;
  if (!kiln::cache::http_remote_supported()) missing = "this kiln was built without libcurl's headers";
  else if (!kiln::test::NginxServer::find_binary()) missing = "nginx not found (PATH, /usr/sbin/nginx, or NGINX=...)";
  else if (std::system("python3 -c 'import http.server' >/dev/null 2>&1") != 0) missing = "python3 not found";
  if (missing != nullptr) {
    if (in_ci) {
      std::printf("FAILED: %s; CI must run these tests (scripts/setup.sh installs nginx-light, python3, "
                  "libcurl4-openssl-dev)\n", missing);
      return 1;
    }
    std::printf("SKIPPED: %s\n", missing);
    return 77;
  }
  return kiln_test::run_catch(argc, argv);
}
