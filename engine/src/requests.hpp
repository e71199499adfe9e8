#pragma once
// Requests (requests.cpp, requests_includes.cpp): what the engine builds from a call before it looks in any
// cache. One plan() is the front half of every request (program, prewarm, compile, describe_key, and kiln
// prewarm's planner): the target resolved, the request made (its vendor's flags from the vendor table, its
// include folders), the compiler's identity and targets (Compilers, resolving the includes ahead while a
// compiler loads), the key, the dependency part settled through the include home, and the request recorded
// (KILN_RECORD). EngineCore takes the planned request through its memory tiers, single flight, the storage,
// the compile and the load, and comes back here to re-key, resolve, retry and record dependencies.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine_internal.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/includes/include_home.hpp"
#include "kiln/source.hpp"
#include "kiln/tooling/targets.hpp"

namespace kiln::detail {

class Compilers;

/// A request as the engine works on it: the source, target, names and vendor flags it was made from, and
/// the key made of them.
struct Request {
  Request(Source source_in, Target target_in, std::vector<std::string> names_in)
      : source(std::move(source_in)), target(std::move(target_in)), names(std::move(names_in)) {}
  Source source;
  Target target;
  std::vector<std::string> names;  // sorted, unique: the name expressions given to the compiler (and the key)
  /// The plain names of the source's extern "C" kernels (sorted): found in the binary by their symbol, so
  /// neither given to the compiler nor in the key (Requests::take_c_kernels, c_kernels.hpp).
  std::vector<std::string> by_symbol;
  /// Every name as the caller asked: `names` and `by_symbol`, sorted.
  [[nodiscard]] std::vector<std::string> requested_names() const;
  std::vector<std::string> flags;  // complete vendor flags
  std::string compiler;            // the identity the key was made with
  /// Include folders (-I, then the toolkit's) in search order: absolute, normal, checked to be folders.
  std::vector<std::filesystem::path> include_folders;
  /// The compile could open files: include folders are given, or the source or a header names a file by
  /// an absolute path or through a macro (opens_files_by_name). kiln then resolves every include itself
  /// and the key has two levels; otherwise the compiler gets in-memory headers only and can open no file
  /// (make_request's search flags), and the key has one level.
  bool reads_files = false;
  /// With include folders, the request's two-level key (dep_manifest.hpp): `request_key` is every input
  /// but the headers' bytes (the include folders are part of it); it names the dependency manifest.
  cache::CanonicalKey request_key;
  cache::Hash128 request_hash;
  /// The key part naming what the compile reads from the folders (cache::canonical_dependencies): from
  /// the manifest (a hit by stat) or the resolver. Empty while not settled; `key` then is the request key.
  std::string dependency_part;
  /// The dependency part is settled (a request that reads no file has none to settle). False only after a
  /// plan that settles by the manifest alone found none that matches (Settle::manifest_only).
  bool settled = false;
  /// The resolver's output (what the compiler gets in memory). Null after a manifest hit: a compile
  /// resolves again first (EngineCore::obtain_uncached).
  std::shared_ptr<const kiln::includes::ResolvedIncludes> includes;
  /// Headers a failed compile asked for that the scan could not see (Requests::retry_with_missing_header).
  std::vector<std::string> retry_names;
  /// Resolve every branch, not the lean walk's: its compile asked for a header the lean set left out.
  bool full_headers = false;
  /// The includes resolved while the compiler loaded (Requests' resolve_ahead), for the identity the key
  /// names: the first settle takes them unless the manifest settles the request.
  std::optional<kiln::includes::Settled> ahead;
  cache::CanonicalKey key;  ///< the entry's key: with include folders, request_key + the dependencies
  cache::Hash128 hash;
};

/// How plan() settles which files a request reads (nothing to settle for a request that reads none).
struct Settle {
  enum class Mode : std::uint8_t {
    /// From the dependency manifest when it still matches by stat, else by resolving: every request path.
    manifest,
    /// From the manifest or not at all, never by resolving (no header is read; no resolve ahead either):
    /// kiln prewarm's planner, which needs only whether the key is cached (Engine::plan_prewarm).
    manifest_only,
    /// As a manifest_only plan left it, a moment ago in this process or another (Engine::prewarm with a
    /// PrewarmPlan): with `planned_key`, the dependency part its manifest records for that entry, not checked
    /// by stat again (else as `manifest`, when the manifest no longer holds it); without, by resolving at once
    /// (the plan asked the manifest, which did not settle it).
    planned,
  };
  Mode mode = Mode::manifest;
  std::optional<cache::Hash128> planned_key;  ///< with Mode::planned only
};

/// The front half of the engine's requests, and what the back half asks of a request.
class Requests {
 public:
  /// The include home is the engine's (its manifests beside `storage`'s local store, counting into
  /// `counters`); `compilers` and `devices` are borrowed from the engine, which outlives this object.
  /// `record_path`: KILN_RECORD's request log, none when empty.
  Requests(cache::Storage& storage, cache::AtomicCounters& counters, Compilers& compilers, const Devices& devices,
           const std::filesystem::path& record_path);
  ~Requests();
  Requests(const Requests&) = delete;
  Requests& operator=(const Requests&) = delete;

  /// The front half of a request: the target resolved (with `device` >= 0 that device's target and warp size;
  /// else `target`, where "native" is the default device's), the request made and keyed, its includes settled
  /// as `how` says (Settle), and, when `record`, the request recorded (KILN_RECORD). Throws ConfigError,
  /// DeviceUnavailable (no compiler; "native" without a device).
  [[nodiscard]] Request plan(const Source& source, const Options& options, const std::vector<std::string>& names,
                             std::string_view target, int device, const Settle& how, bool record);

  /// Keys the request (again) with this compiler identity: the canonical request key (and, once settled, the
  /// entry key with the dependency part).
  static void make_key(Request& request, const std::string& compiler_identity);
  /// Settles which files a request with include folders reads, and so its entry key: from the dependency
  /// manifest when `use_manifest` and it still matches (no header is read), else by resolving the includes.
  /// Does nothing for a request without include folders.
  void settle_includes(Request& request, bool use_manifest);
  /// After a CompileError: the request resolved again with the header the compiler's log asked for (an
  /// include the scan cannot follow, e.g. through a function-like macro), when a folder has it and the
  /// request has not retried that name yet; else nullopt. Each retry costs one compiler run; at most
  /// includes::IncludeHome::kMaxRetries per request.
  [[nodiscard]] std::optional<Request> retry_with_missing_header(const Request& request, const CompileError& error);
  /// Records the dependencies the resolver found for a request in its manifest (after its entry was found
  /// or compiled), so the next request is settled by stat. Never throws.
  void note_dependencies(const Request& request) noexcept;
  /// What a settled request's key names of the folders (describe_key): the resolve's set, or the one its
  /// manifest recorded for its entry (resolving again when the manifest changed since it matched). Empty
  /// for a request that reads no file.
  [[nodiscard]] cache::DependencySet dependencies(Request& request);
  /// The bytes of a request's dependency manifest (publishing stored entries to the remotes); nullopt for none.
  [[nodiscard]] std::optional<std::vector<std::byte>> manifest_bytes(const cache::Hash128& request_key) const;

 private:
  Request make_request(const Source& source, const Options& options, const std::vector<std::string>& names,
                       std::string_view target_text, std::optional<int> warp_size, bool ahead);
  /// The compiler's identity and targets for a request whose flags and include folders are set. When that
  /// means loading the compiler (no probe names it) and `ahead` allows, a request that reads files resolves
  /// its includes meanwhile (resolve_ahead).
  std::shared_ptr<const CompilerFacts> facts_for(Request& request, bool ahead);
  /// Loads the compiler on a helper thread while this one resolves the request's includes for the identity
  /// the compiler's files announce (vendor::expected_identity). Returns that identity and the resolve, or
  /// nullopt when it did not (no guess, the load already tried, no thread, the resolve failed).
  std::optional<std::pair<std::string, includes::Settled>> resolve_ahead(const Request& request);
  /// The include folders of a request with `options` (-I, then with --toolkit-includes the toolkit's):
  /// absolute, normal, checked to be folders (ConfigError).
  std::vector<std::filesystem::path> include_folders(const Options& options, Vendor vendor);
  /// Moves the request's plain names of extern "C" kernels from `names` to `by_symbol` (c_kernels.hpp).
  static void take_c_kernels(Request& request);
  /// Settles as plan() was asked to.
  void settle(Request& request, const Settle& how);
  /// Settle::manifest_only: the manifest's answer when it still matches by stat; false (the request left
  /// unsettled) otherwise.
  bool settle_by_manifest(Request& request);
  /// Settle::planned with a key: the dependency part the request's manifest records for that entry, when it
  /// still does and gives that key; false (nothing changed) otherwise.
  bool settle_as_recorded(Request& request, const cache::Hash128& entry_key);
  /// A request with include folders whose dependency part is settled: its entry key, the request key
  /// plus that part (as make_key would give it).
  static void key_with_dependencies(Request& request);
  /// Checks the key against the readers' limit (ConfigError) and sets the request's hash.
  static void seal_key(Request& request);
  /// The request as the include home takes it: views into it, and into `headers`, which this fills with
  /// the views of its in-memory headers.
  static includes::SettleInput include_request(const Request& request, std::vector<includes::MemoryHeader>& headers);
  void record(const Source& source, const Options& options, const std::vector<std::string>& names,
              const std::string& target);

  Compilers& m_compilers;
  const Devices& m_devices;
  // Include folders: settles and records requests' dependency parts (and keeps the header files its
  // resolves read).
  std::unique_ptr<includes::IncludeHome> m_includes;
  std::unique_ptr<RequestRecorder> m_recorder;
};

}  // namespace kiln::detail
