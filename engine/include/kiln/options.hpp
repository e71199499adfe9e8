#pragma once
// Compile options. kiln accepts one portable spelling and maps it to each compiler:
//   -DNAME / -DNAME=VALUE     define a macro                    (both)
//   -UNAME                    undefine a macro                  (both)
//   -std=c++17 | -std=c++20   language standard (default c++17) (both)
//   --fast-math               NVRTC --use_fast_math ; HIPRTC -ffast-math
//   --line-info               NVRTC -lineinfo       ; HIPRTC -gline-tables-only
//   --device-debug            NVRTC -G              ; HIPRTC -g
//   --no-fma                  NVRTC -fmad=false     ; HIPRTC -ffp-contract=off
//   --max-registers=N         NVRTC -maxrregcount=N ; HIPRTC (rejected: no equivalent)
//   --relocatable-device-code NVRTC -rdc=true (a relocatable CUBIN: ELF type ET_REL, for a link step);
//   (or -rdc, -rdc=true)      HIPRTC (rejected: clang offload bitcode, -fgpu-rdc, is not produced)
//   -Xcuda=FLAG / -Xhip=FLAG  a raw flag for one compiler only; ignored by the other
//   -I DIR / -IDIR / --include-path=DIR
//                             an include folder, searched in the order given (both)
//   --toolkit-includes        also search the include folders of the toolkit whose compiler kiln
//                             loaded (CUDA: include/ and include/cccl; HIP: include/) (both)
//   --no-default-device       NVRTC: compile without -default-device, which kiln otherwise adds (an
//                             unannotated function is then a host function, NVRTC's own default: what a
//                             runtime that compiles without that flag, e.g. cuda.core, gets; it also
//                             changes the binary, as -default-device makes namespace-scope constexpr
//                             variables device variables); HIPRTC: nothing (it has no such mode)
// Include folders are never passed to a compiler: kiln resolves every #include itself and hands the
// compiler the headers it found in memory, so the bytes of each header a compile read are known
// and can be part of the cache key. The folders themselves are part of the canonical text (a
// different search order can find different headers).
// A known flag of one compiler written without -X (e.g. --use_fast_math, -O3) is accepted for that
// compiler, and is a ConfigError for the other one that names the portable spelling. Unknown options
// and target options (-arch, --offload-arch: the target is its own argument) are rejected, and so are
// raw flags that change what kind of output a compile gives (-dlto, -rdc, -dc, -fgpu-rdc, -flto, ...):
// the output kind is kiln's to know (it is stored with the binary), so LTO-IR is asked for by an lto_XY
// target and relocatable code by --relocatable-device-code.
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache/types.hpp"

namespace kiln {
namespace detail {
/// FNV-1a, 64-bit: a cheap hash of short texts for in-process tables (never for cache keys).
constexpr std::uint64_t fnv1a64(std::string_view text) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : text) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}
}  // namespace detail

class Options {
 public:
  Options() = default;
  /// Parses portable options. Throws ConfigError naming the bad option.
  Options(std::initializer_list<std::string_view> options);
  explicit Options(const std::vector<std::string>& options);

  Options& define(std::string_view name, std::string_view value = {});
  Options& fast_math(bool on = true) { m_fast_math = on; refresh(); return *this; }
  Options& line_info(bool on = true) { m_line_info = on; refresh(); return *this; }
  Options& relocatable(bool on) { m_relocatable = on; refresh(); return *this; }
  /// --relocatable-device-code was given.
  [[nodiscard]] bool relocatable() const noexcept { return m_relocatable; }

  /// Canonical text: one option per line, sorted where order has no meaning (defines by name, flags),
  /// raw -X flags in the order given. Equal option sets give equal text.
  [[nodiscard]] const std::string& canonical() const;
  /// A 64-bit hash of canonical(), kept current with it (the engine's in-memory lookup uses it).
  [[nodiscard]] std::uint64_t canonical_hash() const noexcept { return m_canonical_hash; }
  /// The options as the caller spelled them (canonical order), for messages and manifests.
  [[nodiscard]] std::vector<std::string> portable() const;
  /// The flags for one vendor's compiler, without the target and the flags the engine adds itself.
  /// Never an include folder (headers go to the compiler in memory).
  /// Throws ConfigError for an option with no equivalent on that vendor.
  [[nodiscard]] std::vector<std::string> vendor_flags(Vendor vendor) const;
  /// The -I / --include-path folders as given, in order (not checked here: the include resolver
  /// reports a folder that does not exist).
  [[nodiscard]] const std::vector<std::string>& include_dirs() const noexcept { return m_include_dirs; }
  /// True when --toolkit-includes was given: the engine adds the loaded toolkit's include folders
  /// after include_dirs().
  [[nodiscard]] bool toolkit_includes() const noexcept { return m_toolkit_includes; }
  /// True when --no-default-device was given: the engine does not add NVRTC's -default-device.
  [[nodiscard]] bool no_default_device() const noexcept { return m_no_default_device; }

 private:
  void parse_one(std::string_view option);
  void refresh();
  bool m_fast_math = false;
  bool m_line_info = false;
  bool m_device_debug = false;
  bool m_no_fma = false;
  bool m_relocatable = false;
  std::optional<int> m_max_registers;
  std::string m_std = "c++17";
  std::map<std::string, std::optional<std::string>, std::less<>> m_defines;  // nullopt value = -U
  struct RawFlag {
    Vendor vendor;
    std::string flag;
    bool explicit_prefix;  ///< -Xcuda=/-Xhip=: ignored by the other vendor; otherwise an error there
  };
  std::vector<RawFlag> m_raw;
  std::vector<std::string> m_include_dirs;  ///< in the order given: the search order
  bool m_toolkit_includes = false;
  bool m_no_default_device = false;
  std::string m_canonical = "options/1\n";  ///< kept current by every mutation (no lazy state: thread-safe reads)
  std::uint64_t m_canonical_hash = detail::fnv1a64("options/1\n");
};

}  // namespace kiln
