#pragma once
// The engine: request -> key -> memory tier -> disk tier -> compile -> load -> Kernel.
// The one header a C++ program includes: it brings the whole C++ API, kiln::Error and its kinds included.
#if !defined(__cplusplus) || __cplusplus < 202002L
// Said first, before the standard headers this one needs fail in their own words. find_package(kiln)'s
// kiln::kiln brings the flag; pkg-config's kiln does not (its flags serve C programs too).
#error "kiln's C++ API needs C++20: compile with -std=c++20 (or later)"
#endif
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/base/hash.hpp"
#include "kiln/cache/dependencies.hpp"
#include "kiln/cache/stats.hpp"
#include "kiln/cache/store.hpp"
#include "kiln/device.hpp"
#include "kiln/error.hpp"
#include "kiln/launch.hpp"
#include "kiln/options.hpp"
#include "kiln/source.hpp"

namespace kiln {

namespace cache {
struct StorageConfig;  // kiln/cache/storage.hpp
class Storage;         // kiln/cache/storage.hpp
struct TierHealth;     // kiln/cache/storage.hpp
struct StoredPublish;  // kiln/cache/storage.hpp
}  // namespace cache

namespace detail {
struct KernelState;
struct ProgramState;
struct BinaryState;
class EngineCore;
struct EngineAccess;  // tests/support/engine_access.hpp: test-only
}  // namespace detail

struct EngineConfig {
  /// none = auto: the first lane with a device (KILN_VENDOR=auto|cuda|hip). A vendor whose runtime
  /// cannot be loaded (the toolkit without the driver: a build container) gives a compile-only engine,
  /// as auto does without a GPU: named targets compile, running kernels throws DeviceUnavailable.
  Vendor vendor = Vendor::none;
  /// -1 = KILN_DEVICE, else 0. An ordinal past the last device is a ConfigError (past 0 when there is
  /// no device: 0 stays every compile-only engine's default).
  int device = -1;
  cache::StoreConfig cache;      ///< KILN_CACHE_DIR, KILN_CACHE_DISABLE, KILN_CACHE_READONLY, KILN_CACHE_MAXSIZE
  std::string record_path;       ///< KILN_RECORD: append each distinct request to this JSON-lines request log
  std::vector<std::string> packs;  ///< KILN_CACHE_PACKS (colon-separated): read-only pack layers under the store
  std::string remote;            ///< KILN_REMOTE_CACHE: redis:// and http(s):// URLs, ','-separated (a chain)
  /// false: a compile-only engine that loads no GPU runtime (no cuInit, no device query): prewarm
  /// workers and build machines. Named targets only; running kernels throws DeviceUnavailable.
  bool runtime = true;
  /// Reads every KILN_* variable. Throws ConfigError for a malformed value (naming the variable).
  static EngineConfig from_environment();
  /// The storage front end's configuration (include kiln/cache/storage.hpp to call it): the cache,
  /// the packs and the remote, as the engine opens them.
  [[nodiscard]] cache::StorageConfig storage_config() const;
  /// Every read-through tier this configuration names (packs, then the remotes), opened to be inspected
  /// as an engine would open them, without compile leases (cache::inspect_tiers; include
  /// kiln/cache/storage.hpp to call it). `ask_servers`: each remote is asked whether it answers. For
  /// `kiln devices` and `kiln cache stats`, which need no engine for it. Never throws for a broken tier
  /// (it is reported).
  [[nodiscard]] std::vector<cache::TierHealth> tiers(bool ask_servers) const;
};

/// The local cache as an engine uses it (Engine::cache_state), for tools that report it.
struct CacheState {
  std::filesystem::path root;
  cache::StoreMode mode = cache::StoreMode::memory_only;
  std::string mode_reason;      ///< why it is not read_write (empty when it is)
  std::uint64_t max_size = 0;   ///< the size limit
  std::string last_put_error;   ///< why the last write failed: a refused shard directory, a full disk (empty: none)
};

/// Whether Engine::kernel() treats `name` as a name expression (e.g. "scale<float>", "ns::k",
/// "&k"): any of the characters < > : & ( or a space makes one, and the kernel is then requested by
/// that expression; otherwise it is a plain (extern "C") name.
[[nodiscard]] bool is_name_expression(std::string_view name) noexcept;

/// A launchable kernel on one device. Cheap to copy; keeps its module alive.
class Kernel {
 public:
  Kernel() = default;

  /// Packs `args` with natural alignment, checks them against the binary's parameters (count, sizes)
  /// and the block against the kernel's limit, then launches. Throws LaunchError.
  template <typename... Args>
  void launch(const LaunchConfig& config, const Args&... args) const {
    ArgPack pack;
    (pack.push(args), ...);
    launch_packed(config, pack);
  }
  void launch_packed(const LaunchConfig& config, const ArgPack& args) const;

  [[nodiscard]] const std::string& name() const;          ///< as requested
  [[nodiscard]] const std::string& lowered_name() const;  ///< the symbol in the binary
  [[nodiscard]] int device() const;
  [[nodiscard]] int max_threads_per_block() const;
  /// The parameters the binary declares, when the driver/metadata exposes them.
  [[nodiscard]] const std::optional<std::vector<ParamInfo>>& params() const;
  /// CUfunction / hipFunction_t.
  [[nodiscard]] void* native_handle() const;
  explicit operator bool() const noexcept { return m_state != nullptr; }

 private:
  friend class Program;
  friend class detail::EngineCore;
  explicit Kernel(std::shared_ptr<const detail::KernelState> state) : m_state(std::move(state)) {}
  std::shared_ptr<const detail::KernelState> m_state;
};

/// Where a binary came from. New values are only ever appended (the C API mirrors the numbers).
/// Program and PrewarmResult report any cache tier's hit as `disk`; only CompiledBinary tells a
/// mounted pack or the remote tier apart from the local disk cache.
enum class Origin : std::uint8_t {
  memory,    ///< this engine's memory (a loaded module, an earlier compile(), another thread's compile)
  disk,      ///< the local disk cache (Program, PrewarmResult: any cache tier)
  compiled,  ///< compiled by this call
  pack,      ///< a mounted pack (EngineConfig::packs); CompiledBinary only
  remote,    ///< the remote tier (EngineConfig::remote); CompiledBinary only
};

/// A compiled module (one source + options + name expressions) loaded on one device.
class Program {
 public:
  Program() = default;
  /// A kernel by plain name or by one of the program's name expressions. Throws LoadError listing the
  /// kernels the module has.
  [[nodiscard]] Kernel kernel(std::string_view name_or_expression) const;
  [[nodiscard]] std::vector<std::string> kernel_names() const;
  [[nodiscard]] const cache::Hash128& key() const;
  [[nodiscard]] const std::string& target() const;
  [[nodiscard]] int device() const;
  [[nodiscard]] Origin origin() const;
  explicit operator bool() const noexcept { return m_state != nullptr; }

 private:
  friend class detail::EngineCore;
  explicit Program(std::shared_ptr<detail::ProgramState> state) : m_state(std::move(state)) {}
  std::shared_ptr<detail::ProgramState> m_state;
};

/// The result of compiling into the cache without loading (works with no GPU).
struct PrewarmResult {
  cache::Hash128 key;
  std::string target;
  Origin origin = Origin::compiled;  ///< disk (already cached) or compiled
  double seconds = 0;                ///< the request's own time (the compile's, for a compile)
  /// Time spent before that: looking in the tiers and waiting for another process's compile of the same
  /// key (the cross-process compile lease), reported apart so a wait is not taken for compile time.
  double wait_seconds = 0;
  std::size_t binary_bytes = 0;
  bool stored = false;               ///< written to the disk tier
};

/// What Engine::plan_prewarm finds of a request without compiling it or reading a header (kiln prewarm's
/// planner), for the prewarm() that serves the request, in this process or another over the same cache.
struct PrewarmPlan {
  /// The request's key, when known without reading a header: always for a request that reads no file, and
  /// for one whose dependency manifest still matches by stat. nullopt: only resolving the request's includes
  /// can tell, which the prewarm() given this plan does at once (the plan asked the manifest already).
  std::optional<cache::Hash128> key;
};

/// What a compiled binary is. The values match cache::PayloadKind and the C API's kiln_binary_kind.
enum class BinaryKind : std::uint8_t {
  cubin = 1,            ///< an NVIDIA ELF for one sm_XX target
  ptx = 2,              ///< NVIDIA PTX text (compute_XX targets), JIT-compiled by the driver at load
  amd_code_object = 3,  ///< an AMDGPU code object (ELF) for one gfx target
  /// NVIDIA LTO-IR (lto_XY targets, NVRTC -dlto): input to a link step (nvJitLink with -lto), which gives
  /// the CUBIN; kiln stores and returns it but never loads it (Engine::program refuses it).
  ltoir = 4,
};

/// A binary compiled (or found in a cache) for one target, not loaded anywhere: for runtimes that load
/// modules themselves (CuPy, Numba, Warp). Immutable and cheap to copy (copies share one state); it
/// owns its bytes, so it stays valid after its Engine is destroyed.
class CompiledBinary {
 public:
  CompiledBinary() = default;

  /// The binary: a CUBIN, PTX text (not NUL-terminated), an AMDGPU code object or LTO-IR, as kind() says.
  /// Valid as long as any copy of this CompiledBinary lives.
  [[nodiscard]] std::span<const std::byte> bytes() const;
  [[nodiscard]] BinaryKind kind() const;
  /// The resolved target: "sm_90", "compute_90", "lto_90", "gfx90a:sramecc+:xnack-" ("native" is resolved).
  [[nodiscard]] const std::string& target() const;
  /// The cache key (the same as prewarm() and program() give for the same request).
  [[nodiscard]] const cache::Hash128& key() const;
  /// memory (an earlier compile() of this request on this engine), disk, pack, remote or compiled.
  [[nodiscard]] Origin origin() const;
  /// Each name expression of the request and the symbol it lowered to, sorted by expression.
  [[nodiscard]] const std::vector<std::pair<std::string, std::string>>& lowered_names() const;
  /// The symbol of one name expression of the request, or null when it is not one of them.
  [[nodiscard]] const std::string* lowered_name(std::string_view expression) const;
  /// The compiler's log of this compile (warnings; often empty). Empty whenever the binary came from a
  /// cache (origin other than compiled): logs are not cached.
  [[nodiscard]] const std::string& log() const;
  /// Time this compile() call took (lookups included).
  [[nodiscard]] double seconds() const;
  explicit operator bool() const noexcept { return m_state != nullptr; }

 private:
  friend class detail::EngineCore;
  explicit CompiledBinary(std::shared_ptr<const detail::BinaryState> state) : m_state(std::move(state)) {}
  std::shared_ptr<const detail::BinaryState> m_state;
};

class Engine {
 public:
  /// From the environment (EngineConfig::from_environment()).
  Engine();
  explicit Engine(EngineConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Compiles (or finds) and loads a program on a device (-1 = the engine's default device).
  /// Throws CompileError, LoadError, ConfigError, DeviceUnavailable.
  [[nodiscard]] Program program(const Source& source, const Options& options = {},
                                const std::vector<std::string>& name_expressions = {}, int device = -1);
  /// program(source, options, {name} if name is an expression).kernel(name). A kernel already
  /// loaded is answered from memory without hashing any text.
  [[nodiscard]] Kernel kernel(const Source& source, std::string_view name, const Options& options, int device = -1);
  /// The same with default options on the default device.
  [[nodiscard]] Kernel kernel(const Source& source, std::string_view name);

  /// Compiles into the cache for a named target ("sm_90", "gfx90a", "native") without loading.
  /// Needs no GPU for named targets. Throws CompileError, ConfigError, DeviceUnavailable. A name in
  /// `name_expressions` whose symbol is not a kernel of the binary is a ConfigError naming the kernels
  /// it has (the entry stays cached: it is a correct binary for its key).
  PrewarmResult prewarm(const Source& source, const Options& options,
                        const std::vector<std::string>& name_expressions, std::string_view target);
  /// The same, and each of `kernels` (plain names that kernel(source, name) will look up by symbol;
  /// they are not part of the program's key) must be a kernel of the binary too.
  PrewarmResult prewarm(const Source& source, const Options& options,
                        const std::vector<std::string>& name_expressions, std::string_view target,
                        const std::vector<std::string>& kernels);

  /// For a planner that serves requests elsewhere (kiln prewarm): whether a request can be made (else throws
  /// as prewarm() would: ConfigError, DeviceUnavailable) and its key when that needs no header read
  /// (PrewarmPlan). Compiles nothing, resolves no include and records nothing (KILN_RECORD): the dependency
  /// manifest is checked by stat at most.
  [[nodiscard]] PrewarmPlan plan_prewarm(const Source& source, const Options& options,
                                         const std::vector<std::string>& name_expressions, std::string_view target);
  /// prewarm() of a request plan_prewarm() planned a moment ago, here or in another process over the same
  /// cache, without settling its includes again: the plan's key is taken as its dependency manifest records
  /// it (not checked by stat again), and a request the plan could not key is resolved without asking the
  /// manifest again. So a request is settled once, by whichever process serves it.
  PrewarmResult prewarm(const Source& source, const Options& options, const std::vector<std::string>& name_expressions,
                        std::string_view target, const std::vector<std::string>& kernels, const PrewarmPlan& plan);

  /// Compiles (or finds) the binary for a target ("sm_90", "compute_90" for PTX, "lto_90" for LTO-IR,
  /// "gfx90a", or "native" for the default device) and returns it without loading it (LTO-IR is never
  /// loaded: it is input to a link step). Needs no GPU for a named target. Looks in this engine's memory
  /// first (the same request answered earlier by this engine's compile(): origin
  /// memory, no disk access; the last 256 such requests are remembered), then every cache tier, then
  /// compiles and stores like prewarm().
  /// Headers read from include folders (-I, or an include by absolute path): within one engine, a header's
  /// stat is reused for up to a second (ManifestConfig::stat_memo), so a header edited less than a second
  /// after a compile that read it can still be compiled into a *new* request (another kernel over the same
  /// tree) with the bytes that compile read; another process, or this one a second later, sees the edit.
  /// A header changed in the last 2 s is never trusted by its stat across processes.
  /// Throws CompileError, ConfigError, DeviceUnavailable.
  [[nodiscard]] CompiledBinary compile(const Source& source, const Options& options = {},
                                       const std::vector<std::string>& names = {}, std::string_view target = "native");

  /// The cache key a request would have for a target, without compiling: (hash, canonical bytes).
  /// For `kiln cache why-miss`. `dependencies` (optional), for a request with include folders, receives
  /// the headers and absent paths the key names (as the dependency manifest recorded them when it still
  /// matches, else as resolved now); it is left empty for a request without include folders.
  /// Throws ConfigError / DeviceUnavailable like prewarm().
  [[nodiscard]] std::pair<cache::Hash128, std::string> describe_key(const Source& source, const Options& options,
                                                                    const std::vector<std::string>& name_expressions,
                                                                    std::string_view target,
                                                                    cache::DependencySet* dependencies = nullptr);

  /// What compiling the request here would do with a precompiled header (NVRTC's, kept in the cache or
  /// private to a process), one line for `kiln cache why-miss`: "a stored precompiled header (<key>, ...): a
  /// compile uses it", "none stored yet (<key>): this header set's next compile makes it", "none: <why>", ...
  /// Reads the request's headers; compiles, makes and changes nothing. Throws ConfigError like describe_key().
  [[nodiscard]] std::string pch_outlook(const Source& source, const Options& options,
                                        const std::vector<std::string>& name_expressions, std::string_view target);

  /// The vendor lane that runs kernels (none when there is no device).
  [[nodiscard]] Vendor vendor() const;
  [[nodiscard]] std::vector<DeviceInfo> devices() const;
  [[nodiscard]] int default_device() const;
  /// Every vendor lane: compiled in, libraries loaded (paths and versions), devices. Loads what it can.
  [[nodiscard]] std::vector<LaneInfo> lanes() const;
  /// The default targets for prewarming: the local devices' targets, or sm_90 and gfx90a without one.
  [[nodiscard]] std::vector<std::string> default_targets() const;

  /// This engine's counters.
  [[nodiscard]] cache::Counters stats() const;
  /// The storage front end under the engine's memory: the local store and its tiers (packs, the remote).
  /// Entries under a caller's own key (kiln/cache/blob.hpp) are stored and looked up through it.
  [[nodiscard]] cache::Storage& storage();

  // For tools (the kiln CLI) that report on the cache below the engine without reaching into it.

  /// Where the local cache is, its mode and why, its limit, and why its last write failed.
  [[nodiscard]] CacheState cache_state() const;
  /// Whether the local store has a file under `key` (a stat: not read, so not verified). Never throws.
  [[nodiscard]] bool cached_locally(const cache::Hash128& key) const noexcept;
  /// Which tier below the local store holds `key` (its description: "pack /p.kilnpack", "redis
  /// host:6379/0"), asked in order, nothing copied into the local store (cache::tier_holding over this
  /// engine's configuration); empty when none does. `errors` gets why each tier that cannot be opened
  /// cannot.
  [[nodiscard]] std::string tier_holding(const cache::Hash128& key, std::string_view canonical_key,
                                         std::vector<std::string>& errors) const;
  /// Writes the local entries under `keys` (and the dependency manifests of their requests) to every
  /// remote tier now: cache::Storage::publish_stored (include kiln/cache/storage.hpp to call it). Throws
  /// std::runtime_error when a configured remote cannot be opened.
  [[nodiscard]] cache::StoredPublish publish_to_remotes(std::span<const cache::Hash128> keys);
  /// What destroying the engine does for the cache, for a process that ends with _exit (kiln prewarm
  /// and its workers): the remote tiers closed (queued publishes written for at most their close_flush,
  /// leases released, their lifetime counters recorded) and this engine's counters added to the cache's
  /// lifetime counters (record_stats). Only _exit should follow: the tiers are closed. Never throws.
  void prepare_exit() noexcept;
  /// Adds this engine's counters since it was made, or since its last record, to the cache's lifetime
  /// counters (`kiln cache stats`), as destroying it does for the rest: for a process that keeps its engine
  /// until it exits and is not destroyed then (a language runtime's default engine). Never throws.
  void record_stats() noexcept;

  /// Unloads every module. Kernels obtained before keep their handles but refuse to launch.
  void unload_all();

  // Thin device helpers (for callers without their own allocator/streams).
  [[nodiscard]] void* allocate(std::size_t bytes, int device = -1);
  void free(void* pointer, int device = -1) noexcept;
  void copy_to_device(void* dst, const void* src, std::size_t bytes, StreamHandle stream = nullptr, int device = -1);
  void copy_to_host(void* dst, const void* src, std::size_t bytes, StreamHandle stream = nullptr, int device = -1);
  void memset(void* dst, int value, std::size_t bytes, StreamHandle stream = nullptr, int device = -1);
  [[nodiscard]] StreamHandle create_stream(int device = -1);
  void destroy_stream(StreamHandle stream, int device = -1) noexcept;
  void synchronize(StreamHandle stream = nullptr, int device = -1);


 private:
  friend struct detail::EngineAccess;
  std::shared_ptr<detail::EngineCore> m_core;
};

}  // namespace kiln
