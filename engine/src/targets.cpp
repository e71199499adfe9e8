#include "kiln/tooling/targets.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "kiln/base/hot_path.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

KILN_HOT bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}
KILN_HOT bool all_alnum_lower(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
  });
}

[[noreturn]] void bad_target(std::string_view text) {
  throw ConfigError(fmt::format(
      "unknown target '{}': expected sm_XY[a|f] (CUBIN), compute_XY[a|f] (PTX) or lto_XY[a|f] (LTO-IR) "
      "(NVIDIA) or gfxNNN[:feature+|-...] (AMD), e.g. sm_90, sm_90a, lto_90, gfx90a, gfx90a:sramecc+:xnack-",
      text));
}

}  // namespace

std::string hip_relocatable_refusal(std::string_view what) {
  return fmt::format(
      "{}: kiln produces no relocatable or LTO output for AMD targets. The HIP equivalent is clang offload "
      "bitcode (hipcc -fgpu-rdc, linked into a code object by the offload linker), which kiln does not produce "
      "through HIPRTC; compile for the gfx target without it (an AMDGPU code object), or build with hipcc "
      "-fgpu-rdc offline",
      what);
}

KILN_HOT Target parse_target(std::string_view text) {
  Target t;
  t.full = std::string(text);
  // NVIDIA: sm_ gives a CUBIN, compute_ PTX, lto_ LTO-IR (as nvcc spells its code= kinds). NVRTC takes no
  // -arch=lto_XY: LTO-IR is asked for by -dlto with the virtual arch compute_XY (vendor_table.cpp, requests.cpp).
  constexpr std::pair<std::string_view, PayloadKind> kNvidia[] = {
      {"sm_", PayloadKind::cubin}, {"compute_", PayloadKind::ptx}, {"lto_", PayloadKind::ltoir}};
  for (const auto& [prefix, output] : kNvidia) {
    if (!text.starts_with(prefix)) continue;
    std::string_view number = text.substr(prefix.size());
    if (output == PayloadKind::ltoir && number.starts_with("gfx")) {
      throw ConfigError(hip_relocatable_refusal(fmt::format("target '{}'", text)));
    }
    if (!number.empty() && (number.back() == 'a' || number.back() == 'f')) number.remove_suffix(1);
    if (!all_digits(number) || number.size() < 2 || number.size() > 3) bad_target(text);
    t.vendor = Vendor::cuda;
    t.base = "sm_" + std::string(number);
    t.output = output;
    t.arch = output == PayloadKind::ltoir ? "compute_" + std::string(text.substr(prefix.size())) : t.full;
    t.warp_size = 32;
    return t;
  }
  if (text.starts_with("gfx")) {
    const std::size_t colon = text.find(':');
    const std::string_view processor = text.substr(0, colon);
    if (!all_alnum_lower(processor.substr(3)) || processor.size() < 6) bad_target(text);
    std::string_view features = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
    bool sramecc = false;
    bool xnack = false;
    while (colon != std::string_view::npos) {
      const std::size_t next = features.find(':');
      const std::string_view feature = features.substr(0, next);
      if (feature != "sramecc+" && feature != "sramecc-" && feature != "xnack+" && feature != "xnack-") {
        throw ConfigError(fmt::format("target '{}': unknown feature '{}' (known: sramecc+, sramecc-, xnack+, xnack-)",
                                      text, feature));
      }
      // Each feature is on or off once: "xnack+:xnack-" names no target.
      bool& seen = feature.starts_with("xnack") ? xnack : sramecc;
      if (seen) {
        throw ConfigError(
            fmt::format("target '{}': feature '{}' is given twice (each of sramecc and xnack at most once)", text,
                        feature.substr(0, feature.size() - 1)));
      }
      seen = true;
      if (next == std::string_view::npos) break;
      features.remove_prefix(next + 1);
    }
    t.vendor = Vendor::hip;
    t.base = std::string(processor);
    t.arch = t.full;
    t.output = PayloadKind::amdgpu_code_object;
    // Wave64 on GCN/CDNA (gfx6-gfx9), wave32 by default on RDNA (gfx10+), as HIPRTC compiles them.
    const std::string_view digits = processor.substr(3);
    t.warp_size = (digits.size() >= 4) ? 32 : 64;
    return t;
  }
  bad_target(text);
}

void validate_target(const Target& target, const std::vector<std::string>& supported, std::string_view compiler) {
  if (std::find(supported.begin(), supported.end(), target.base) != supported.end()) return;
  throw ConfigError(fmt::format("target '{}' is not supported by {} (supported: {})", target.full, compiler,
                                fmt::join(supported, " ")));
}

}  // namespace kiln::detail
