// The main of every test binary that does not bring its own (a static library member: a test file that defines
// main keeps its own).
#include "catch_run.hpp"

int main(int argc, char** argv) { return kiln_test::run_catch(argc, argv); }
