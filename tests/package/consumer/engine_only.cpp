// The one header the README's C++ example includes: it must bring kiln::Error (a program catches it), and say
// first, in a line of its own, that it needs C++20 when compiled as an older C++ (pkg-config's flags serve C
// too, so they carry no -std=c++20). Compiled by tests/package/run_package_test.cmake, with pkg-config's flags.
#include <kiln/engine.hpp>

int main() {
  try {
    kiln::Engine engine;
    return engine.devices().size() > 1000 ? 1 : 0;
  } catch (const kiln::Error&) {
    return 1;
  }
}
