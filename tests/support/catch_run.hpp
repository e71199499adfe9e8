#pragma once
// Catch2's session, compiled once (catch_session.cpp) for every test binary: a test file with a main of its own
// (a child mode, a skip before any test) includes <catch2/catch.hpp> as every test file does, never with
// CATCH_CONFIG_RUNNER or CATCH_CONFIG_MAIN (house_rules), and ends its main with `return kiln_test::run_catch(argc,
// argv);`. Compiling Catch2's implementation into each such file cost 10-15 s of CPU a file.
namespace kiln_test {

/// Runs the registered test cases with Catch2's command line (a Catch::Session made and gone within the call).
int run_catch(int argc, char** argv);

}  // namespace kiln_test
