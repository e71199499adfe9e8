#pragma once
// Target ids: parsing, the vendor a target belongs to, its warp size, validation against what the
// loaded compiler supports. Shared by both lanes (no vendor API here).
// kiln/tooling/: the engine's interface to kiln's own tools (the CLI). Installed with the other
// headers so an installed CLI builds against it, but not part of the stable API: it may change in
// any release.
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache/types.hpp"

namespace kiln::detail {

struct Target {
  Vendor vendor = Vendor::none;
  std::string full;  ///< as given, normalised: "sm_90a", "compute_90", "lto_90", "gfx90a:sramecc+:xnack-"
  std::string base;  ///< what the compiler's list names: "sm_90", "gfx90a"
  std::string arch;  ///< what the compiler's arch flag gets: "sm_90a", "compute_90" (lto_90 too), "gfx90a:xnack-"
  /// What the target gives: sm_XY a CUBIN, compute_XY PTX, lto_XY LTO-IR, gfx an AMDGPU code object.
  PayloadKind output = PayloadKind::cubin;
  int warp_size = 32;
};

/// Parses "sm_90", "sm_90a", "sm_100f", "compute_90", "lto_90", "lto_90a", "gfx90a", "gfx90a:sramecc+:xnack-".
/// Throws ConfigError for anything else (naming the accepted forms); "lto_gfx90a" and the like say that
/// kiln produces no LTO or relocatable output for AMD targets (hip_relocatable_refusal).
[[nodiscard]] Target parse_target(std::string_view text);

/// Why an AMD request for relocatable or LTO output is refused, after "<what>: ": what the HIP
/// equivalent would be (clang offload bitcode, -fgpu-rdc) and that kiln does not produce it.
[[nodiscard]] std::string hip_relocatable_refusal(std::string_view what);

/// Throws ConfigError when target.base is not in `supported`, listing what the compiler supports.
void validate_target(const Target& target, const std::vector<std::string>& supported, std::string_view compiler);

}  // namespace kiln::detail
