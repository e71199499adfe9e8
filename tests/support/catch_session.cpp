// Catch2's implementation, once for every test binary (catch_run.hpp).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_run.hpp"

namespace kiln_test {

int run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }

}  // namespace kiln_test
