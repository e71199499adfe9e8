#pragma once
// Small vocabulary types shared by the cache and the engine. The cache stores these as numbers;
// it knows nothing else about GPUs.
#include <cstdint>
#include <string_view>

namespace kiln {

/// Which vendor lane produced or runs a binary. Stored in entries: never renumber.
enum class Vendor : std::uint8_t { none = 0, cuda = 1, hip = 2 };

/// The highest vendor: the vendors are 1 to this. A new vendor is added after it and named here; what differs
/// by vendor is the engine's vendor table (engine/src/vendor_table.cpp), one row per vendor, which checks its
/// rows against this at compile time.
inline constexpr Vendor kLastVendor = Vendor::hip;

/// What an entry's payload is. Stored in entries: never renumber.
/// ltoir: NVIDIA LTO-IR (NVRTC -dlto), input to a link step (nvJitLink), never a loadable module.
/// blob: bytes a caller stored under a key of its own (blob.hpp: kiln_blob_put), not a compile's output;
/// kiln never loads or links one.
enum class PayloadKind : std::uint8_t { cubin = 1, ptx = 2, amdgpu_code_object = 3, ltoir = 4, blob = 5 };

[[nodiscard]] constexpr std::string_view to_string(Vendor v) noexcept {
  switch (v) {
    case Vendor::cuda: return "cuda";
    case Vendor::hip: return "hip";
    case Vendor::none: break;
  }
  return "none";
}

/// The vendor whose compiler makes a payload kind; none for a blob (a caller's bytes). A switch over every
/// kind with no default, so that a new kind must name its vendor here.
[[nodiscard]] constexpr Vendor maker_of(PayloadKind k) noexcept {
  switch (k) {
    case PayloadKind::cubin:
    case PayloadKind::ptx:
    case PayloadKind::ltoir:
      return Vendor::cuda;
    case PayloadKind::amdgpu_code_object:
      return Vendor::hip;
    case PayloadKind::blob:
      break;
  }
  return Vendor::none;
}

[[nodiscard]] constexpr std::string_view to_string(PayloadKind k) noexcept {
  switch (k) {
    case PayloadKind::cubin: return "cubin";
    case PayloadKind::ptx: return "ptx";
    case PayloadKind::amdgpu_code_object: return "amd_code_object";  // as BinaryKind, KILN_BINARY_AMD_CODE_OBJECT, Python
    case PayloadKind::ltoir: return "ltoir";
    case PayloadKind::blob: return "blob";
  }
  return "unknown";
}

}  // namespace kiln
