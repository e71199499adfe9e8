#pragma once
// The engine's internal state, shared by the engine's parts (EngineCore in engine.cpp; Requests and
// Compilers, its parts for a request's front half and its compilers) and the handles (Program, Kernel).
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

namespace kiln::includes {
struct CompilerView;  // kiln/includes/include_home.hpp
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

/// The runtime that runs kernels and its devices, fixed when the engine is made (EngineCore's; Requests
/// reads it for a request's "native" target).
struct Devices {
  std::shared_ptr<vendor::Runtime> runtime;
  std::string error;  ///< why there is no runtime, or no device: DeviceUnavailable's message
  int default_device = 0;
  int count = 0;  ///< the runtime's devices (fixed at construction); 0 without a runtime

  /// The runtime, or DeviceUnavailable explaining why there is none.
  [[nodiscard]] vendor::Runtime& usable() const;
};

class Compilers;
class Requests;
struct Request;
struct Settle;

/// What kiln is below the public Engine: the runtime and its devices, the memory tiers, single flight, and
/// obtain / compile / load. A request's front half is Requests' (plan(), requests.hpp), its compilers
/// Compilers' (compilers.hpp); both are parts of the core.
class EngineCore : public std::enable_shared_from_this<EngineCore> {
 public:
  explicit EngineCore(EngineConfig config);
  ~EngineCore();

  /// `prefetched`: the caller (kernel()) has already called prefetch_hot_path() for this request.
  Program program(const Source& source, const Options& options, const std::vector<std::string>& names, int device,
                  bool prefetched = false);
  Kernel kernel(const Source& source, std::string_view name, const Options& options, int device);
  /// `kernels`: plain names the binary must define besides `names` (see Engine::prewarm). `settle`: how the
  /// request's includes are settled (Settle::planned for a request Engine::plan_prewarm planned).
  PrewarmResult prewarm(const Source& source, const Options& options, const std::vector<std::string>& names,
                        std::string_view target, const std::vector<std::string>& kernels, const Settle& settle);
  /// Engine::plan_prewarm: the request made and keyed, its includes settled by the manifest only.
  PrewarmPlan plan_prewarm(const Source& source, const Options& options, const std::vector<std::string>& names,
                           std::string_view target);
  CompiledBinary compile(const Source& source, const Options& options, const std::vector<std::string>& names,
                         std::string_view target);
  std::pair<cache::Hash128, std::string> describe_key(const Source& source, const Options& options,
                                                      const std::vector<std::string>& names, std::string_view target,
                                                      cache::DependencySet* dependencies);

  /// Engine::pch_outlook: the request planned as describe_key plans it, its headers read, the lane asked.
  std::string pch_outlook(const Source& source, const Options& options, const std::vector<std::string>& names,
                          std::string_view target);

  [[nodiscard]] Vendor vendor() const noexcept {
    return m_devices.runtime ? m_devices.runtime->vendor() : Vendor::none;
  }
  [[nodiscard]] std::vector<DeviceInfo> devices() const;
  [[nodiscard]] int default_device() const noexcept { return m_devices.default_device; }
  [[nodiscard]] std::vector<LaneInfo> lanes();
  [[nodiscard]] std::vector<std::string> default_targets() const;
  [[nodiscard]] cache::Counters stats() const noexcept;
  /// Adds what this engine counted since it was made, or since its last record, to the cache's lifetime
  /// counters (<root>/stats, `kiln cache stats`); nothing on a cache that is not read-write. The destructor
  /// records the rest, so a process that records at exit and one whose engine is destroyed count once.
  void record_lifetime() noexcept;
  [[nodiscard]] cache::RemoteTier* remote() noexcept { return m_storage.remote(); }
  [[nodiscard]] cache::Store& store() noexcept { return m_storage.local(); }
  [[nodiscard]] cache::Storage& storage() noexcept { return m_storage; }
  /// Writes stored entries, with the manifests of their requests, to every remote now (the manifests'
  /// bytes come from the include home, through Requests).
  [[nodiscard]] cache::StoredPublish publish_stored(std::span<const cache::Hash128> keys);
  void unload_all() noexcept;
  /// The file the compiler would be loaded from: the first existing full path of its search list (a stat,
  /// no load); nullopt when none exists (Compilers::file).
  std::optional<std::filesystem::path> compiler_file(Vendor vendor) const;
  /// The runtime, or DeviceUnavailable explaining why there is none.
  vendor::Runtime& runtime() { return m_devices.usable(); }
  /// -1 -> the default device; an ordinal is checked. Inline: it runs on every memory-tier hit.
  int resolve_device(int device) {
    if (device < 0 ? m_devices.count > 0 : device < m_devices.count) {
      return device < 0 ? m_devices.default_device : device;
    }
    return resolve_device_slow(device);  // throws the reason
  }

 private:
  struct Flight;
  int resolve_device_slow(int device);
  /// obtain_entry, then the check of the names taken by symbol: when the binary lacks one of them as a kernel
  /// (the text misled Requests::take_c_kernels), the request is keyed and obtained again with every name
  /// given to the compiler.
  Obtained obtain(const Request& request, bool bypass_cache);
  /// The entry of a request: the local store, else (one thread per key: single flight) the other tiers,
  /// another process's compile, or a compile here.
  Obtained obtain_entry(const Request& request, bool bypass_cache);
  Obtained obtain_uncached(const Request& request, bool bypass_cache);
  /// What the compiler is handed for a request: views into `view` (a resolve's) and `headers`, which must
  /// outlive it.
  vendor::CompileInput compile_input(const Request& request, includes::CompilerView& view,
                                     std::vector<vendor::HeaderText>& headers);
  /// Compiles a request into an entry; the compiler's log (of a successful compile) goes to `log`.
  std::shared_ptr<const cache::Entry> compile(const Request& request, const vendor::Compiler& compiler,
                                              std::string& log);
  std::shared_ptr<ProgramState> load(const Request& request, Obtained obtained, int device);

  EngineConfig m_config;
  cache::Storage m_storage;          // the local store, the tiers under it, the compile lease
  cache::AtomicCounters m_counters;  // the engine's own: memory hits and compiles (storage keeps the rest)
  std::mutex m_recorded_mutex;
  cache::Counters m_recorded;  // what record_lifetime() added to the lifetime counters so far
  Devices m_devices;                 // set while constructing; fixed afterwards
  std::unique_ptr<Compilers> m_compilers;
  std::unique_ptr<Requests> m_requests;

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
