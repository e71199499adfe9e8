#pragma once
// The interface every lane implements: find and load the libraries, compile (RTC), load a module, look
// up a function, launch, free. Nothing else: everything both vendors do (keys, options, targets,
// argument checks, caching) lives above this, once. The only lane header the rest of the engine uses.
//
// A lane is one vendor library with one job: nvrtc.cpp and hiprtc.cpp compile (Compiler), cuda_driver.cpp
// and hip_runtime.cpp load and launch (Runtime). Each is compiled in only when its vendor's headers
// exist at build time (lanes.cpp answers for the others).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache/entry.hpp"
#include "kiln/device.hpp"
#include "kiln/launch.hpp"
#include "kiln/source.hpp"

namespace kiln::cache {
class Store;  // kiln/cache/store.hpp
}  // namespace kiln::cache

namespace kiln::vendor {

/// A header handed to the compiler: its name and text, NUL-terminated, alive until the compile returns.
struct HeaderText {
  const char* name = nullptr;
  const char* text = nullptr;
};

/// The compiler's view of in-memory headers (pointing into `headers`, which must outlive it).
inline std::vector<HeaderText> header_texts(std::span<const Header> headers) {
  std::vector<HeaderText> out;
  out.reserve(headers.size());
  for (const Header& h : headers) out.push_back({h.name.c_str(), h.text.c_str()});
  return out;
}

struct CompileInput {
  std::string_view source_name;
  std::string_view source;
  std::span<const HeaderText> headers;
  std::span<const std::string> name_expressions;
  std::span<const std::string> flags;  ///< complete: target and engine-added flags included
  std::string_view target;
  /// An lto_XY target: the output is LTO-IR (NVRTC: -dlto is among the flags; nvrtcGetLTOIR). HIPRTC
  /// refuses it (kiln makes no clang offload bitcode).
  bool lto_ir = false;
  /// Where the source's prelude ends: the raw offset just past the last #include that follows code, 0 for
  /// none (the include home's word, kiln/includes/include_home.hpp's CompilerView: a lane never scans).
  /// NVRTC's PCH moves that prefix into a header of its own (nvrtc_pch.hpp).
  std::size_t prelude_end = 0;
  /// The engine's local disk cache, where NVRTC's precompiled headers are kept for every process
  /// (nvrtc_pch_store.hpp); null: none (they stay private to the process).
  cache::Store* store = nullptr;
};

struct CompileOutput {
  PayloadKind kind = PayloadKind::cubin;
  std::vector<std::byte> binary;
  std::vector<std::byte> ptx;  ///< CUDA: kept beside the CUBIN; empty for LTO-IR and HIP
  std::vector<cache::LoweredName> lowered;
  std::string log;
  bool pch_made = false;  ///< the compile made a precompiled header (NVRTC, nvrtc_pch.hpp)
  bool pch_used = false;  ///< the compile used one an earlier compile (of this process, or stored by any) made
};

/// A run-time compiler (NVRTC or HIPRTC), loaded with dlopen.
class Compiler {
 public:
  virtual ~Compiler() = default;
  [[nodiscard]] virtual Vendor vendor() const noexcept = 0;
  /// Identity and exact version, part of every key: "nvrtc 13.0", "hiprtc hip-5.2.21153 comgr-2.4".
  [[nodiscard]] virtual const std::string& identity() const noexcept = 0;
  [[nodiscard]] virtual std::vector<LibraryInfo> libraries() const = 0;
  /// Targets this compiler accepts, e.g. {"sm_75", ..., "sm_121"} or {"gfx900", "gfx90a", ...}.
  /// Feature suffixes (sm_90a, gfx90a:xnack-) are validated by the engine against these bases.
  [[nodiscard]] virtual std::vector<std::string> supported_targets() const = 0;
  /// Compiles; throws CompileError carrying the whole log. Thread-safe.
  [[nodiscard]] virtual CompileOutput compile(const CompileInput& input) const = 0;
  /// Whether compiles use precompiled headers, one line for `kiln devices` ("on (...)", "off: <why>").
  [[nodiscard]] virtual std::string precompiled_headers() const = 0;
  /// What a compile of `input` would do with a precompiled header, one line for `kiln cache why-miss` ("a stored
  /// precompiled header (...): a compile uses it", "none stored yet ...", "none: ..."). Changes nothing.
  [[nodiscard]] virtual std::string pch_outlook(const CompileInput& input) const = 0;
};

/// What a loaded function declares.
struct FunctionInfo {
  int max_threads_per_block = 0;
  int num_regs = 0;
  std::size_t static_shared_bytes = 0;
  std::optional<std::vector<ParamInfo>> params;  ///< nullopt when the driver cannot tell
};

/// A device runtime (CUDA driver API or HIP module API), loaded with dlopen.
class Runtime {
 public:
  virtual ~Runtime() = default;
  [[nodiscard]] virtual Vendor vendor() const noexcept = 0;
  [[nodiscard]] virtual std::vector<LibraryInfo> libraries() const = 0;
  [[nodiscard]] virtual const std::vector<DeviceInfo>& devices() const noexcept = 0;
  /// Makes `device` current on the calling thread (primary context / hipSetDevice). Cheap when it
  /// already is.
  virtual void make_current(int device) = 0;

  /// Loads a binary on a device. CUDA falls back to the entry's PTX when the CUBIN is refused.
  /// Throws LoadError naming the call, the error and the entry.
  [[nodiscard]] virtual void* load_module(int device, const cache::Entry& entry) = 0;
  virtual void unload_module(int device, void* module) noexcept = 0;
  /// nullptr when the module has no such symbol.
  [[nodiscard]] virtual void* get_function(void* module, const std::string& lowered_name) = 0;
  /// Attributes and parameter layout. `entry` is the loaded binary (HIP reads its metadata).
  [[nodiscard]] virtual FunctionInfo function_info(void* function, const cache::Entry& entry,
                                                   const std::string& lowered_name) = 0;
  virtual void set_max_dynamic_shared(void* function, std::size_t bytes) = 0;
  /// Makes `device` current and launches. `checked`: the pack was verified against the parameters the
  /// binary declares (count, sizes, offsets), so the vendor may pass per-argument pointers (CUDA's
  /// kernelParams, its fastest form); otherwise only the packed-buffer form, whose size the driver
  /// is told, is safe. The hot path: no locks, no allocation. Throws LaunchError.
  virtual void launch(int device, void* function, const LaunchConfig& config, const ArgPack& args, bool checked) = 0;

  [[nodiscard]] virtual void* allocate(int device, std::size_t bytes) = 0;
  virtual void free(int device, void* pointer) noexcept = 0;
  virtual void copy_to_device(int device, void* dst, const void* src, std::size_t bytes, StreamHandle stream) = 0;
  virtual void copy_to_host(int device, void* dst, const void* src, std::size_t bytes, StreamHandle stream) = 0;
  virtual void memset(int device, void* dst, int value, std::size_t bytes, StreamHandle stream) = 0;
  [[nodiscard]] virtual StreamHandle create_stream(int device) = 0;
  virtual void destroy_stream(int device, StreamHandle stream) noexcept = 0;
  virtual void synchronize(int device, StreamHandle stream) = 0;
  /// The device a stream belongs to, when the vendor can tell (mismatch checks); nullopt otherwise.
  [[nodiscard]] virtual std::optional<int> stream_device(StreamHandle stream) = 0;

 protected:
  /// make_current for the noexcept releases (unload, free, destroy stream): false when it failed, and
  /// the caller skips its release: without its device current the call could act on another context,
  /// and a noexcept release has no way to report.
  bool try_make_current(int device) noexcept {
    try {
      make_current(device);
      return true;
    } catch (...) {
      return false;
    }
  }
};

// Factories. Each throws DeviceUnavailable naming every path searched, or naming a missing symbol.
// Defined only when the lane is compiled in (KILN_HAVE_CUDA / KILN_HAVE_HIP).
std::unique_ptr<Compiler> load_nvrtc();
std::unique_ptr<Runtime> load_cuda_runtime();
std::unique_ptr<Compiler> load_hiprtc();
std::unique_ptr<Runtime> load_hip_runtime();

/// The paths load_nvrtc / load_hiprtc try, in order (a bare file name is left to the dynamic loader's
/// search). Lets the engine recognise a compiler it has probed before without loading it. Empty when
/// the lane is compiled out.
std::vector<std::string> nvrtc_search_list();
std::vector<std::string> hiprtc_search_list();

/// The identity the compiler in `library` (a file of its search list) will report once loaded, as far as
/// the files beside it say so without loading it; nullopt when they do not. A guess that may be wrong:
/// the engine uses it only for work it checks against the loaded compiler's identity (EngineCore::
/// resolve_ahead). NVRTC: its builtins library beside it is named for NVRTC's major.minor version
/// (libnvrtc-builtins.so.13.0 beside libnvrtc.so.13, which reports "nvrtc 13.0"). HIPRTC: nullopt.
std::optional<std::string> expected_identity(Vendor vendor, const std::filesystem::path& library);

}  // namespace kiln::vendor
