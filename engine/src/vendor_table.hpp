#pragma once
// The vendor table: one row per Vendor with everything that differs by vendor above the lanes. Its name
// and compiler's name, whether its lane is compiled in and why not, its loaders and its compiler's search
// list (the lanes' factories), the flags a request for it gets, its spellings of the portable options, and
// what the include home must know of its compiler. The rest of the engine looks a vendor up here (or asks
// a lane object) and never switches on which vendor it is, so that a third vendor is a row here and its
// lanes, and one the table lacks fails to build rather than taking another vendor's branch
// (tests/unit/house_rules.py keeps two-way vendor switches out of every file but this table's and the lanes').
#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache/types.hpp"
#include "kiln/includes/include_home.hpp"

namespace kiln::vendor {
class Compiler;
class Runtime;
}  // namespace kiln::vendor

namespace kiln::detail {

/// A flag one compiler knows and the others reject: accepted for its own compiler, explained for another.
struct Spelling {
  std::string_view flag;      ///< the vendor flag, or its prefix when `prefix` is true
  bool prefix;                ///< matches "flag..." (e.g. -maxrregcount=32)
  std::string_view portable;  ///< the portable spelling to suggest, empty if none
};

/// One vendor's spellings of the portable options (Options::vendor_flags, options.cpp).
struct OptionSpellings {
  std::string_view fast_math;     ///< --fast-math
  std::string_view line_info;     ///< --line-info
  std::string_view device_debug;  ///< --device-debug
  std::string_view no_fma;        ///< --no-fma
  /// --max-registers=N: this, then N; empty when the compiler has no such flag (the option is refused).
  std::string_view max_registers;
  /// --relocatable-device-code; empty when the vendor has none (refused with relocatable_refusal).
  std::string_view relocatable;
  /// Why relocatable code is refused, for `what` (an option or target named by the caller); null when it is not.
  std::string (*relocatable_refusal)(std::string_view what);
  /// A raw option with this prefix goes to this vendor's compiler only (-Xcuda=, -Xhip=).
  std::string_view only_prefix;
  /// The flags only this compiler takes (a raw option found here is this vendor's).
  std::span<const Spelling> own;
};

/// How a request for this vendor is handed to its compiler (Requests' make_request), in this order after the
/// options' flags: the target's arch, the LTO-IR flag for an LTO-IR target, the default-device flag (unless
/// --no-default-device), the flag that turns the compiler's own search of folders off.
struct RequestFlags {
  std::string_view arch;            ///< followed by the target's arch: "-arch=sm_90"
  std::string_view lto_ir;          ///< asks for LTO-IR (an lto_XY target); empty: the vendor makes none
  std::string_view default_device;  ///< unannotated functions are device functions; empty: nothing to add
  /// The compiler searches no folder of its own: every file it may open is one kiln resolved and keyed.
  std::string_view no_search;
  /// Environment variables that silently change the compiler's flags: part of every key of this vendor
  /// (as "NAME=value\n" lines, in this order, under the key's "env" part; no part when there are none).
  std::span<const char* const> key_environment;
};

struct VendorRow {
  Vendor vendor;
  std::string_view compiler_name;   ///< "NVRTC": in messages
  std::string_view compiler_role;   ///< the role of the compiler's library in LibraryInfo ("nvrtc")
  bool compiled_in;                 ///< its lanes were built (the vendor's headers were found at build time)
  const char* lane_status;          ///< when not compiled in, why: "CUDA lane " KILN_CUDA_STATUS
  std::string_view default_target;  ///< what to prewarm for on a machine without a device (Engine::default_targets)
  // The lane factories (lanes/lane.hpp): each throws DeviceUnavailable saying why (a lane compiled out says so).
  std::unique_ptr<vendor::Compiler> (*load_compiler)();
  std::unique_ptr<vendor::Runtime> (*load_runtime)();
  /// The paths load_compiler tries, in order (empty when compiled out): the compiler probe's, found by stat.
  std::vector<std::string> (*search_list)();
  RequestFlags request;
  OptionSpellings options;
  /// What the include home must know of this vendor's compiler (SettleInput::traits).
  includes::CompilerTraits includes;
};

/// One row per vendor (Vendor::cuda to kLastVendor), in the enum's order: the order an engine without a
/// configured vendor tries the runtimes in, and the order lanes are reported in.
inline constexpr std::size_t kVendorCount = static_cast<std::size_t>(kLastVendor);

/// Every row, in the enum's order.
[[nodiscard]] std::span<const VendorRow, kVendorCount> vendor_rows() noexcept;
/// The row of a vendor; null for Vendor::none (and for a number that names no vendor).
[[nodiscard]] const VendorRow* find_vendor_row(Vendor vendor) noexcept;
/// The row of a vendor. Throws ConfigError for Vendor::none (a request always names its vendor).
[[nodiscard]] const VendorRow& vendor_row(Vendor vendor);
/// The row's place in vendor_rows(), for tables of per-vendor state (Compilers' lanes). `vendor` is one.
[[nodiscard]] constexpr std::size_t vendor_index(Vendor vendor) noexcept {
  return static_cast<std::size_t>(vendor) - 1;
}

}  // namespace kiln::detail
