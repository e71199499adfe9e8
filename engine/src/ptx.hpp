#pragma once
// What a kernel's PTX declares about its parameters. NVRTC keeps PTX beside each CUBIN (the CUDA
// lane's cache entries hold both, from one compile); its `.entry name(...)` line lists every
// parameter with its type, so the CUDA block learns a kernel's parameter count without asking the
// driver for an index past the last one (a failing call, and the driver's slowest answer).
//
// Hostile or unexpected input: nothing here throws (except std::bad_alloc) or reads outside the given
// text; anything this reader does not recognise gives nullopt, and the caller asks the driver instead.
#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace kiln::ptx {

/// The byte size of each parameter PTX declares for the entry `name` (a lowered name), in order; an
/// empty vector for an entry without parameters. nullopt when the text has no `.entry name(`, or
/// declares a parameter in a form not recognised here (a type without a known size, a malformed
/// array, an unclosed list). Trailing NUL bytes of `ptx` are ignored.
[[nodiscard]] std::optional<std::vector<std::size_t>> entry_param_sizes(std::string_view ptx, std::string_view name);

}  // namespace kiln::ptx
