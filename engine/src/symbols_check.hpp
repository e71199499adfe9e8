#pragma once
// Whether a binary defines the kernels a prewarm asked for. A compile succeeds for a source that lacks
// the kernel a caller will later ask for by plain name (extern "C" kernels are found by symbol at load
// time, not named to the compiler), and a name expression can lower to a symbol that is not a kernel;
// without this check prewarm would report such a request "compiled" or "cached" and the mistake would
// surface only on a GPU, at load time.
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache/entry.hpp"

namespace kiln::detail {

/// Throws ConfigError naming every requested kernel the binary of `entry` does not define, and the
/// kernels it does define. `names`: the request's name list (as given to the compiler; each is looked
/// up by its lowered symbol). `kernels`: plain names a later lookup will ask for by symbol. Kernels are
/// read from the binary itself: CUBIN and AMDGPU code objects through their ELF symbols, PTX (and the
/// PTX kept beside a CUBIN) through its `.entry` lines. A binary whose format cannot be read is not
/// judged (nothing is thrown); nor is LTO-IR, whose body kiln does not read.
/// Whether the binary of `entry` defines every one of `kernels` as a kernel symbol. False when its format
/// cannot be read (or is LTO-IR): the caller then cannot rely on finding them by symbol.
[[nodiscard]] bool defines_kernels(const cache::Entry& entry, const std::vector<std::string>& kernels);

void check_kernels_defined(const cache::Entry& entry, std::string_view source_name,
                           const std::vector<std::string>& names, const std::vector<std::string>& kernels);

}  // namespace kiln::detail
