// The HIPRTC lane: compiles HIP C++ to an AMDGPU code object for one gfx target. Search order:
// $ROCM_PATH/lib (default /opt/rocm/lib), then the loader's path; libhiprtc.so.{7,6,5}, then the HIPRTC
// symbols inside libamdhip64.so.{7,6,5} (HIP 5.x has no separate libhiprtc; HIP 7 has them only
// there). comgr, found beside it, names the targets it accepts. Every library is dlopen'ed; types come
// from HIP's hiprtc.h at build time.
#include <fmt/format.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <mutex>

#include "kiln/error.hpp"
#include "kiln/tooling/targets.hpp"
#include "lanes/dynlib.hpp"
#include "lanes/hip_symbols.hpp"
#include "lanes/lane.hpp"
#include "lanes/rocm.hpp"
#include "lanes/rtc_compile.hpp"
#include "lanes/symbols.hpp"

namespace kiln::vendor {
namespace {

KILN_SYMBOL_TABLE(HiprtcApi, KILN_HIPRTC_SYMBOLS)
KILN_SYMBOL_TABLE(ComgrApi, KILN_COMGR_SYMBOLS)
KILN_RTC_CALLS(HiprtcCalls, HiprtcApi, hiprtc, hiprtcProgram, hiprtcResult, HIPRTC_SUCCESS)

/// The version a library's real file name carries: libamdhip64.so.5 -> libamdhip64.so.5.2.21153 ->
/// "5.2.21153". Empty when the name carries no "major.minor".
std::string version_from_file_name(const std::string& path) {
  char resolved[PATH_MAX];
  std::string name = realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
  name = name.substr(name.find_last_of('/') + 1);
  const std::size_t so = name.find(".so.");
  if (so == std::string::npos) return {};
  std::string version = name.substr(so + 4);
  return version.find('.') == std::string::npos ? std::string() : version;
}

/// The directory part of a path ("." when none).
std::string directory_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

/// HIPRTC emits diagnostics against a temporary file ("/tmp/comgr-1a2b3c/input/CompileSource:3:5:");
/// this names the caller's source instead.
std::string name_source(std::string text, std::string_view source_name) {
  constexpr std::string_view kTemporary = "CompileSource";
  for (std::size_t at = text.find(kTemporary); at != std::string::npos; at = text.find(kTemporary, at)) {
    std::size_t begin = at;
    while (begin > 0 && text[begin - 1] != ' ' && text[begin - 1] != '\n' && text[begin - 1] != '\t') --begin;
    text.replace(begin, at + kTemporary.size() - begin, source_name);
    at = begin + source_name.size();
  }
  return text;
}

/// Targets per HIP major, used only when the loaded comgr cannot list its ISAs. Conservative: a target
/// HIPRTC 5.2 does not know can abort the process inside it (gfx940 and gfx942 do).
std::vector<std::string> fallback_targets(int hip_major) {
  std::vector<std::string> targets = {
      "gfx600",  "gfx601",  "gfx602",  "gfx700",  "gfx701",  "gfx702",  "gfx703",  "gfx704",  "gfx705",
      "gfx801",  "gfx802",  "gfx803",  "gfx805",  "gfx810",  "gfx900",  "gfx902",  "gfx904",  "gfx906",
      "gfx908",  "gfx909",  "gfx90a",  "gfx90c",  "gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx1030",
      "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"};  // what comgr 2.4 (HIP 5.2) lists
  if (hip_major >= 6) {
    for (const char* t : {"gfx940", "gfx941", "gfx942", "gfx1100", "gfx1101", "gfx1102", "gfx1103"})
      targets.emplace_back(t);
  }
  if (hip_major >= 7) {
    for (const char* t : {"gfx950", "gfx1150", "gfx1151", "gfx1200", "gfx1201"}) targets.emplace_back(t);
  }
  return targets;
}

/// Serializes HIPRTC compiles in this process (all Compiler instances share the library's state).
std::mutex& compile_mutex() {
  static std::mutex mutex;
  return mutex;
}

class Hiprtc final : public Compiler {
 public:
  Hiprtc(DynamicLibrary library, HiprtcApi api, DynamicLibrary comgr, ComgrApi comgr_api)
      : m_library(std::move(library)),
        m_api(api),
        m_calls(HiprtcCalls::of(m_api)),
        m_comgr(std::move(comgr)),
        m_comgr_api(comgr_api) {
    m_version = version_from_file_name(m_library.path());
    int runtime_version = 0;
    if (m_version.empty() && m_api.hipRuntimeGetVersion != nullptr &&
        m_api.hipRuntimeGetVersion(&runtime_version) == hipSuccess && runtime_version > 0) {
      m_version = hip_version_text(runtime_version);
    }
    if (m_version.empty()) m_version = "unknown";
    m_identity = "hiprtc hip-" + m_version;
    if (m_comgr.loaded()) {
      std::size_t major = 0, minor = 0;
      m_comgr_api.amd_comgr_get_version(&major, &minor);
      m_comgr_version = fmt::format("{}.{}", major, minor);
      m_identity += " comgr-" + m_comgr_version;
      read_comgr_targets();
    }
    if (m_targets.empty()) m_targets = fallback_targets(std::atoi(m_version.c_str()));
  }

  Vendor vendor() const noexcept override { return Vendor::hip; }
  const std::string& identity() const noexcept override { return m_identity; }
  std::vector<LibraryInfo> libraries() const override {
    std::vector<LibraryInfo> out = {{"hiprtc", m_library.path(), m_version}};
    if (m_comgr.loaded()) out.push_back({"comgr", m_comgr.path(), m_comgr_version});
    return out;
  }
  std::vector<std::string> supported_targets() const override { return m_targets; }
  std::string precompiled_headers() const override { return "off: " + std::string(kNoPch); }
  std::string pch_outlook(const CompileInput&) const override { return "none: " + std::string(kNoPch); }

  CompileOutput compile(const CompileInput& input) const override {
    const std::string name(input.source_name);
    // HIPRTC 5.2 crashes (SIGSEGV) on an empty source, and aborts on a target it does not know.
    if (input.source.empty()) {
      throw CompileError(fmt::format("cannot compile '{}': the source is empty", name), "", name,
                         rtc::flag_list(input));
    }
    if (input.lto_ir) {
      // The engine never asks (an lto_ target is NVIDIA's); a lane asked directly says what HIP has instead.
      throw ConfigError(
          ::kiln::detail::hip_relocatable_refusal(fmt::format("LTO-IR for '{}' from HIPRTC", input.target)));
    }
    const std::string_view base = input.target.substr(0, input.target.find(':'));
    if (std::find(m_targets.begin(), m_targets.end(), base) == m_targets.end()) {
      throw ConfigError(fmt::format("target '{}' is not supported by {} (supported: {})", input.target, m_identity,
                                    fmt::join(m_targets, " ")));
    }
    std::vector<const char*> flags = rtc::c_strings(input.flags);
    const bool has_arch = std::any_of(input.flags.begin(), input.flags.end(), [](const std::string& f) {
      return f.starts_with("--offload-arch=") || f.starts_with("--gpu-architecture=");
    });
    // Without an arch HIPRTC asks the HIP runtime for the current GPU (and fails without one).
    const std::string arch = fmt::format("--offload-arch={}", input.target);
    if (!has_arch) flags.push_back(arch.c_str());

    // One compile at a time per process. Two HIPRTC 5.2 compiles running at once can produce a
    // different code object (unused device-library functions linked in: LLVM keeps global state), and
    // HIPRTC gains nothing from threads anyway; worker processes scale.
    const std::lock_guard serial(compile_mutex());
    rtc::Program program(m_calls, input);
    CompileOutput out;
    out.kind = PayloadKind::amdgpu_code_object;
    out.log = program.compile(flags, {.rewrite = &name_source,
                                      .when_empty = "empty log: HIPRTC 5.x gives none when it cannot resolve "
                                                    "the target"});
    out.binary = program.fetch(m_api.hiprtcGetCodeSize, m_api.hiprtcGetCode, "GetCodeSize", "GetCode");
    if (out.binary.empty()) {
      throw CompileError(fmt::format("hiprtcGetCodeSize returned 0 bytes for '{}' ({})", name, input.target), out.log,
                         name, rtc::flag_list(input));
    }
    out.lowered = program.lowered_names();
    return out;
  }

 private:
  static constexpr std::string_view kNoPch = "HIPRTC has no precompiled headers (its -hip-pch flag does nothing)";

  /// The gfx targets the loaded comgr lists ("amdgcn-amd-amdhsa--gfx90a:xnack+" -> "gfx90a"), once each.
  void read_comgr_targets() {
    std::size_t count = 0;
    if (m_comgr_api.amd_comgr_get_isa_count == nullptr || m_comgr_api.amd_comgr_get_isa_name == nullptr ||
        m_comgr_api.amd_comgr_get_isa_count(&count) != 0) {
      return;
    }
    for (std::size_t i = 0; i < count && i < 4096; ++i) {
      const char* isa = nullptr;
      if (m_comgr_api.amd_comgr_get_isa_name(i, &isa) != 0 || isa == nullptr) continue;
      std::string_view name(isa);
      if (const std::size_t dashes = name.rfind("--"); dashes != std::string_view::npos) name.remove_prefix(dashes + 2);
      name = name.substr(0, name.find(':'));
      if (name.starts_with("gfx") && std::find(m_targets.begin(), m_targets.end(), name) == m_targets.end()) {
        m_targets.emplace_back(name);
      }
    }
  }

  DynamicLibrary m_library;
  HiprtcApi m_api;
  HiprtcCalls m_calls;
  DynamicLibrary m_comgr;
  ComgrApi m_comgr_api;
  std::string m_version;
  std::string m_comgr_version;
  std::string m_identity;
  std::vector<std::string> m_targets;
};

}  // namespace

std::vector<std::string> hiprtc_search_list() {
  return search_list(rocm_dirs(), {"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5", "libamdhip64.so.7",
                                   "libamdhip64.so.6", "libamdhip64.so.5"});
}

std::unique_ptr<Compiler> load_hiprtc() {
  std::vector<std::string> searched;
  DynamicLibrary library;
  for (const std::string& candidate : hiprtc_search_list()) {
    DynamicLibrary attempt = DynamicLibrary::open_first({candidate}, searched);
    if (!attempt.loaded()) continue;
    // libamdhip64 carries HIPRTC only up to HIP 6.
    if (candidate.find("libamdhip64") != std::string::npos && attempt.symbol("hiprtcCreateProgram") == nullptr) {
      searched.push_back(attempt.path() + " (no HIPRTC symbols)");
      continue;
    }
    library = std::move(attempt);
    break;
  }
  if (!library.loaded()) {
    throw DeviceUnavailable(fmt::format("no HIPRTC found (searched: {}); set ROCM_PATH", join_searched(searched)));
  }
  HiprtcApi api;
  api.require([&](const char* name) { return library.symbol(name); }, "HIPRTC library " + library.path());
  // comgr: beside the HIPRTC library first (the one it uses), then the usual places. Optional.
  std::vector<std::string> comgr_dirs = {directory_of(library.path())};
  for (const std::string& d : rocm_dirs()) comgr_dirs.push_back(d);
  std::vector<std::string> comgr_searched;
  DynamicLibrary comgr =
      DynamicLibrary::open_first(search_list(comgr_dirs, {"libamd_comgr.so.3", "libamd_comgr.so.2"}), comgr_searched);
  ComgrApi comgr_api;
  const bool comgr_usable =
      comgr.loaded() && comgr_api.resolve([&](const char* name) { return comgr.symbol(name); }) == nullptr;
  return std::make_unique<Hiprtc>(std::move(library), api, comgr_usable ? std::move(comgr) : DynamicLibrary(),
                                  comgr_api);
}

}  // namespace kiln::vendor
