// The file kiln_test_pch compiles so that CMake makes the precompiled header every test reuses
// (tests/CMakeLists.txt). It has no tests of its own; Catch2's main comes from kiln_catch_main.
