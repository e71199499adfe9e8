#pragma once
// Which plain kernel names of a request are extern "C" kernels of its source (requests.cpp: Requests::take_c_kernels).
// Such a kernel is found in the binary by its own name, and NVRTC gives the same bytes whether or not it is
// also named to the compiler as a name expression (a template's or a C++ function's name expression is
// another matter: it instantiates, or lowers to a mangled symbol). So the engine neither hands such a name
// to the compiler nor puts it in the key: `engine.kernel(src, "saxpy")`, `engine.program(src, {}, {"saxpy"})`
// and `kiln prewarm` (which names no plain kernel) are one request and meet one cache entry. The key stays
// every input of the compile, since what is left out of it is left out of the compile too.
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::detail {

/// The names among `names` that `text` defines or declares as extern "C" __global__ functions at global
/// scope (not static, not templates): `extern "C" __global__ void k(`, inside an `extern "C" { }` block,
/// or through an object-like macro whose definition says extern "C" and __global__ (kiln/rtc.h's
/// KILN_KERNEL), read from `text` and `macro_texts` (the source's in-memory headers). In the order of `names`.
/// A reading of the text, not of the preprocessed source: the engine checks that the binary has each such
/// kernel, and compiles with the names when one is missing (EngineCore::obtain).
[[nodiscard]] std::vector<std::string> c_kernels_among(std::string_view text,
                                                       std::span<const std::string_view> macro_texts,
                                                       const std::vector<std::string>& names);

}  // namespace kiln::detail
