// Uses the installed C++ API: every public header compiles outside the kiln tree, and an engine
// starts (with or without a GPU).
#include <cstdio>
#include <exception>

#include "kiln/cache/store.hpp"
#include "kiln/device.hpp"
#include "kiln/embedded.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "kiln/kiln.h"
#include "kiln/launch.hpp"
#include "kiln/options.hpp"
#include "kiln/source.hpp"

int main() {
  try {
    const kiln::Options options{"-DCONSUMER=1", "--fast-math"};
    const auto names = kiln::Source::builtin_names();
    kiln::Engine engine;
    std::printf("consumer (C++): %zu built-in sources, %zu devices, options:\n%s\n", names.size(),
                engine.devices().size(), options.canonical().c_str());
    return names.empty() ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer (C++): %s\n", e.what());
    return 1;
  }
}
