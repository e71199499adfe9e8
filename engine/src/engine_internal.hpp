#pragma once
// The engine's internal state, shared by the engine's parts (engine.cpp and the files it names) and the
// handles (Program, Kernel).
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/error.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/cache/stats.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/cache/store.hpp"
#include "kiln/engine.hpp"
#include "lanes/lane.hpp"

// The include home's facade (kiln/includes/include_home.hpp), included by the engine's sources that call
// it, not by every user of this header.
namespace kiln::includes {
class IncludeHome;
struct MemoryHeader;
struct SettleInput;
struct Settled;
}  // namespace kiln::includes

namespace kiln::detail {

class RequestRecorder;
struct CompilerFacts;

/// Throws LoadError when `entry` is not a module a runtime can load (LTO-IR: it needs a link step), before
/// any runtime is asked. Shared by both vendors: the lanes never see such an entry.
void refuse_unloadable(const cache::Entry& entry);

/// A module loaded on one device. Kernels keep it (and the runtime) alive; `loaded` turns false when
/// the engine unloads it, after which its kernels refuse to launch.
struct ProgramState {
  std::shared_ptr<vendor::Runtime> runtime;
  std::shared_ptr<const cache::Entry> entry;
  void* module = nullptr;
  int device = 0;
  Origin origin = Origin::compiled;
  std::atomic<bool> loaded{true};
  std::mutex kernels_mutex;
  std::unordered_map<std::string, std::shared_ptr<const KernelState>> kernels;

  ~ProgramState();
  /// Unloads the module once; safe to call from several threads. Never throws.
  void unload() noexcept;
};

struct KernelState {
  std::shared_ptr<ProgramState> program;
  std::string name;
  std::string lowered;
  void* function = nullptr;
  vendor::FunctionInfo info;
  std::optional<std::vector<ParamInfo>> params;
  std::uint64_t max_shared_optin = 0;
  mutable std::atomic<std::uint32_t> dynamic_shared_limit{48 * 1024};  ///< set above 48 KB on demand
  mutable std::atomic<void*> checked_stream{nullptr};                   ///< last stream verified to match
};

/// A CompiledBinary's state: one per compile() result. A memory-tier hit copies the first result's
/// state with origin memory and no log; the copies share the entry, so the bytes are never copied.
struct BinaryState {
  std::shared_ptr<const cache::Entry> entry;
  std::vector<std::pair<std::string, std::string>> names;  ///< expression -> lowered, sorted
  Origin origin = Origin::compiled;
  double seconds = 0;
  std::string log;
};

/// A memory-tier slot: the inputs of the request it holds and what the tier keeps for that request.
/// A tier's key is a 64-bit hash of the inputs; every hit compares them (matches), so a hash collision
/// is a miss. program() and kernel() keep a device and no target; compile() keeps the target as
/// requested and device -1.
template <class Payload>
struct RequestSlot {
  RequestSlot(const cache::Hash128& source_in, const Options& options_in, std::string_view names_in, int device_in,
              std::string_view target_in, Payload payload_in)
      : source(source_in),
        options(options_in.canonical()),
        names(names_in),
        device(device_in),
        target(target_in),
        payload(std::move(payload_in)) {}

  /// Whether this slot holds the request of these inputs. Runs on every memory-tier hit: builds nothing,
  /// and is always inlined (program() compares twice, and a compiler would otherwise keep one copy out of
  /// line, a call on the hit and code outside the request path's section, kiln/base/hot_path.hpp).
  [[nodiscard]] [[gnu::always_inline]] bool matches(const cache::Hash128& source_in, const Options& options_in,
                                                    std::string_view names_in, int device_in,
                                                    std::string_view target_in) const {
    return source == source_in && device == device_in && same_text(target, target_in) && same_text(names, names_in) &&
           options == options_in.canonical();
  }

  cache::Hash128 source;
  std::string options;  ///< canonical
  std::string names;    ///< the name expressions joined by '\n'; in kernel()'s slot, the kernel's name
  int device;
  std::string target;
  Payload payload;

 private:
  /// As std::string's own operator== compares (sizes, then bytes), which inlines; the one that takes a
  /// string_view is a call.
  [[gnu::always_inline]] static bool same_text(const std::string& kept, std::string_view given) {
    return kept.size() == given.size() && std::char_traits<char>::compare(kept.data(), given.data(), kept.size()) == 0;
  }
};

/// Joins `items` with `separator` between them (the memory tiers' names, a key's flags and names).
std::string join(const std::vector<std::string>& items, char separator);

/// A compiled (or found) binary and how it was obtained.
struct Obtained {
  std::shared_ptr<const cache::Entry> entry;
  /// memory (another thread's compile in this process), disk (found in any tier) or compiled. A pack or
  /// remote hit is `disk` here, as Program and PrewarmResult report it; `tier` tells which it was.
  Origin origin = Origin::compiled;
  double seconds = 0;
  /// For a compile: of `seconds`, the time spent before it in the tiers, waiting for another process's
  /// compile of the same key (its lease) when there was one. 0 for a hit.
  double waited = 0;
  bool stored = false;
  cache::HitOrigin tier = cache::HitOrigin::local;  ///< where a disk hit was found
  std::string log;  ///< the compiler's log when origin is compiled (warnings; often empty), else empty
};

class EngineCore : public std::enable_shared_from_this<EngineCore> {
 public:
  explicit EngineCore(EngineConfig config);
  ~EngineCore();

  /// `prefetched`: the caller (kernel()) has already called prefetch_hot_path() for this request.
  Program program(const Source& source, const Options& options, const std::vector<std::string>& names, int device,
                  bool prefetched = false);
  Kernel kernel(const Source& source, std::string_view name, const Options& options, int device);
  /// `kernels`: plain names the binary must define besides `names` (see Engine::prewarm).
  PrewarmResult prewarm(const Source& source, const Options& options, const std::vector<std::string>& names,
                        std::string_view target, const std::vector<std::string>& kernels = {});
  CompiledBinary compile(const Source& source, const Options& options, const std::vector<std::string>& names,
                         std::string_view target);
  std::pair<cache::Hash128, std::string> describe_key(const Source& source, const Options& options,
                                                      const std::vector<std::string>& names, std::string_view target,
                                                      cache::DependencySet* dependencies);

  [[nodiscard]] Vendor vendor() const noexcept { return m_runtime ? m_runtime->vendor() : Vendor::none; }
  [[nodiscard]] std::vector<DeviceInfo> devices() const;
  [[nodiscard]] int default_device() const noexcept { return m_default_device; }
  [[nodiscard]] std::vector<LaneInfo> lanes();
  [[nodiscard]] std::vector<std::string> default_targets() const;
  [[nodiscard]] cache::Counters stats() const noexcept;
  [[nodiscard]] cache::RemoteTier* remote() noexcept { return m_storage.remote(); }
  [[nodiscard]] cache::Store& store() noexcept { return m_storage.local(); }
  [[nodiscard]] cache::Storage& storage() noexcept { return m_storage; }
  /// Writes stored entries, with the manifests of their requests, to every remote now (engine_includes.cpp:
  /// the manifests' bytes come from the include home).
  [[nodiscard]] cache::StoredPublish publish_stored(std::span<const cache::Hash128> keys);
  void unload_all() noexcept;
  /// The file the compiler would be loaded from: the first existing full path of its search list (a stat,
  /// no load); nullopt when none exists.
  std::optional<std::filesystem::path> compiler_file(Vendor vendor) const;
  /// The runtime, or DeviceUnavailable explaining why there is none.
  vendor::Runtime& runtime();
  /// -1 -> the default device; an ordinal is checked. Inline: it runs on every memory-tier hit.
  int resolve_device(int device) {
    if (device < 0 ? m_device_count > 0 : device < m_device_count) return device < 0 ? m_default_device : device;
    return resolve_device_slow(device);  // throws the reason
  }

 private:
  struct Lane;
  struct Request;
  struct Flight;
  /// The lane with its compiler loaded (once); on failure the lane's error says why.
  Lane& loaded_lane(Vendor vendor);
  int resolve_device_slow(int device);
  /// Identity and targets: from the compiler probe when it still matches, else from loading.
  std::shared_ptr<const CompilerFacts> compiler_facts(Vendor vendor);
  /// The same without loading: null when no probe matches and the compiler is not loaded.
  std::shared_ptr<const CompilerFacts> known_compiler_facts(Vendor vendor);
  /// Reads the lane's compiler probe (once per engine); sets the facts when the probe still matches.
  void probe_compiler(Lane& lane);
  /// "native" -> the default device's target and warp size; any other target as given.
  std::pair<std::string, std::optional<int>> resolve_target(std::string_view target);
  vendor::Compiler& compiler(Vendor vendor);
  /// The compiler library's file, for --toolkit-includes (its toolkit's include folders).
  std::filesystem::path compiler_library(Vendor vendor);
  /// compiler_facts() for a request whose flags and include folders are set. When that means loading the
  /// compiler (no probe names it), a request that reads files resolves its includes meanwhile
  /// (resolve_ahead).
  std::shared_ptr<const CompilerFacts> facts_for(Request& request);
  /// Loads the compiler on a helper thread while this one resolves the request's includes for the
  /// identity the compiler's files announce (vendor::expected_identity). Returns that identity and the
  /// resolve, or nullopt when it did not (no guess, the load already tried, no thread, the resolve failed).
  std::optional<std::pair<std::string, includes::Settled>> resolve_ahead(const Request& request);
  /// The include folders of a request with `options` (-I, then with --toolkit-includes the toolkit's):
  /// absolute, normal, checked to be folders (ConfigError).
  std::vector<std::filesystem::path> include_folders(const Options& options, Vendor vendor);
  Request make_request(const Source& source, const Options& options, const std::vector<std::string>& names,
                       std::string_view target, std::optional<int> warp_size);
  /// Moves the request's plain names of extern "C" kernels from `names` to `by_symbol` (c_kernels.hpp).
  static void take_c_kernels(Request& request);
  /// obtain_entry, then the check of the names taken by symbol: when the binary lacks one of them as a kernel
  /// (the text misled take_c_kernels), the request is keyed and obtained again with every name given to the
  /// compiler, as it was before names were taken.
  Obtained obtain(const Request& request, bool bypass_cache);
  Obtained obtain_entry(const Request& request, bool bypass_cache);
  Obtained obtain_uncached(const Request& request, bool bypass_cache);
  static void make_key(Request& request, const std::string& compiler_identity);
  /// A request with include folders whose dependency part is settled: its entry key, the request key
  /// plus that part (as make_key would give it).
  static void key_with_dependencies(Request& request);
  /// Checks the key against the readers' limit (ConfigError) and sets the request's hash.
  static void seal_key(Request& request);
  /// Settles which files a request with include folders reads, and so its entry key: from the dependency
  /// manifest when `use_manifest` and it still matches (no header is read), else by resolving the
  /// includes. Does nothing for a request without include folders.
  void settle_includes(Request& request, bool use_manifest);
  /// Records the dependencies the resolver found for a request in its manifest (after its entry was
  /// found or compiled), so the next request is settled by stat. Never throws.
  void note_dependencies(const Request& request) noexcept;
  /// After a CompileError: the request resolved again with the header the compiler's log asked for
  /// (an include the scan cannot follow, e.g. through a function-like macro), when a folder has it and
  /// the request has not retried that name yet; else nullopt. Each retry costs one compiler run; at
  /// most includes::IncludeHome::kMaxRetries per request.
  std::optional<Request> retry_with_missing_header(const Request& request, const CompileError& error);
  /// The request as the include home takes it: views into it, and into `headers`, which this fills with
  /// the views of its in-memory headers.
  static includes::SettleInput include_request(const Request& request, std::vector<includes::MemoryHeader>& headers);
  /// Compiles a request into an entry; the compiler's log (of a successful compile) goes to `log`.
  std::shared_ptr<const cache::Entry> compile(const Request& request, const vendor::Compiler& compiler,
                                              std::string& log);
  std::shared_ptr<ProgramState> load(const Request& request, Obtained obtained, int device);
  void record(const Source& source, const Options& options, const std::vector<std::string>& names,
              const std::string& target);

  EngineConfig m_config;
  cache::Storage m_storage;          // the local store, the tiers under it, the compile lease
  cache::AtomicCounters m_counters;  // the engine's own: memory hits and compiles (storage keeps the rest)
  // Include folders: settles and records requests' dependency parts (and keeps the header files its
  // resolves read).
  std::unique_ptr<includes::IncludeHome> m_includes;
  std::unique_ptr<Lane> m_cuda;
  std::unique_ptr<Lane> m_hip;
  std::shared_ptr<vendor::Runtime> m_runtime;
  std::string m_runtime_error;
  int m_default_device = 0;
  int m_device_count = 0;  ///< the runtime's devices (fixed at construction); 0 without a runtime
  std::unique_ptr<RequestRecorder> m_recorder;

  // Memory tier: request -> kernel / program. Keys are a 64-bit hash of (source hash, options, names,
  // device); the slot keeps those inputs and is compared on every hit, so a hash collision is a miss.
  using ProgramSlot = RequestSlot<std::shared_ptr<ProgramState>>;
  using KernelSlot = RequestSlot<Kernel>;
  std::shared_mutex m_memory_mutex;
  std::unordered_map<std::uint64_t, ProgramSlot> m_programs;
  std::unordered_map<std::uint64_t, KernelSlot> m_kernels;

  // compile()'s memory tier: request -> the first result of that request. Keyed like m_programs, with
  // the target as requested in place of the device; the slot keeps and compares its inputs. Bounded: at
  // most kBinarySlots binaries are kept, and the oldest slot makes room for a new one.
  static constexpr std::size_t kBinarySlots = 256;
  struct RememberedBinary {
    std::uint64_t sequence;  ///< insertion order, for eviction
    std::shared_ptr<const BinaryState> binary;
  };
  using BinarySlot = RequestSlot<RememberedBinary>;
  std::mutex m_binaries_mutex;
  std::unordered_map<std::uint64_t, BinarySlot> m_binaries;
  std::uint64_t m_binary_sequence = 0;  ///< guarded by m_binaries_mutex

  // Single flight: one compile per key in this process.
  std::mutex m_flights_mutex;
  std::unordered_map<cache::Hash128, std::shared_ptr<Flight>, cache::Hash128Hasher> m_flights;
};

}  // namespace kiln::detail
