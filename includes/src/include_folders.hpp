#pragma once
// Private to the include home (includes/src/): the work behind the facade (include_home.hpp, whose
// IncludeHome holds one of these and the manifests it uses). A request whose compile could open files
// has a two-level key. The request key (every input but the headers' bytes) names a dependency
// manifest; the entry key adds the dependency part, what the compile reads. IncludeFolders settles that
// part once per request, by stat from the manifest when it still matches and its answer is the request
// keyed with that part (entry_key_hash), else by resolving every include (resolve.hpp), and records what
// a resolve read once the entry is found or compiled. With the storage front end, manifests travel
// through its remote tiers as opaque records: a recorded manifest is published, and a request with no
// manifest here asks the remotes for one before resolving (fetch_remote_manifest, manifest_fetched.hpp).
#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "conditions.hpp"
#include "header_files.hpp"
#include "kiln/base/hash.hpp"
#include "kiln/includes/dep_manifest.hpp"
#include "kiln/cache/stats.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/cache/types.hpp"
#include "paths.hpp"
#include "resolve.hpp"
#include "resolved_sets.hpp"
#include "scan.hpp"

namespace kiln::cache::detail {

// The facade's types (include_home.hpp), by their names inside the home.
using kiln::includes::Settled;
using kiln::includes::SettleInput;

/// Owned by the engine, one per engine: the header files its resolves read, its resolves (a request
/// whose resolve would be one made before takes that one, checked by stat: resolved_sets.hpp), and its
/// way to the cache root's dependency manifests and their stat memo. Counts into the engine's counters:
/// `manifest_hits` for a request settled by stat, `include_resolves` for every resolve that ran (one
/// taken from the held sets reads no header and is not counted). Thread-safe.
class IncludeFolders {
 public:
  /// Retries of one request with a header its failed compile asked for (each costs a compiler run).
  static constexpr std::size_t kMaxRetries = kiln::includes::IncludeHome::kMaxRetries;

  /// Manifests of this machine only.
  IncludeFolders(DependencyManifests& manifests, AtomicCounters& counters);
  /// The manifests, and the storage's remote tiers for them (all borrowed: they outlive this object).
  IncludeFolders(DependencyManifests& manifests, Storage& storage, AtomicCounters& counters);
  IncludeFolders(const IncludeFolders&) = delete;
  IncludeFolders& operator=(const IncludeFolders&) = delete;

  /// The folders a request searches, in order: `include_dirs` (-I), then, with a `toolkit_library`, its
  /// toolkit's (toolkit_include_dirs); each absolute, normal and checked to be a folder (a folder seen
  /// as one less than the stat memo's time ago is not stat'ed again). Throws IncludeError.
  [[nodiscard]] std::vector<std::filesystem::path> folders(std::span<const std::filesystem::path> include_dirs,
                                                           const std::filesystem::path* toolkit_library) const;

  /// Settles which files the request reads: from its dependency manifest when `use_manifest` and every
  /// recorded header still has its stat (or its digest) and every path probed empty is still empty (no
  /// header is read; the answer is taken only when it is entry_key_hash() of the request with the part it
  /// names), else by resolving the includes. With no manifest
  /// here, the storage's remotes are asked for one first (installed only when it names nothing outside
  /// the request's include folders and absolute includes, after each header it names was read and hashed
  /// once within bounds: not resolved). Throws IncludeError (from a resolve).
  [[nodiscard]] Settled settle(const SettleInput& input, bool use_manifest);
  /// settle() by the manifest alone (IncludeHome::settle_by_manifest): nullopt where it would resolve.
  [[nodiscard]] std::optional<Settled> settle_by_manifest(const SettleInput& input);

  /// The resolve settle() would make without a manifest, made ahead (while the compiler loads, before
  /// the request key exists) and counted only when a settle() takes it (SettleInput::ahead).
  /// Throws IncludeError.
  [[nodiscard]] Settled resolve_ahead(const SettleInput& input);

  /// A retry after a failed compile: the header its log says the compiler could not open (an include
  /// the scan cannot follow, e.g. through a function-like macro), and the request resolved again with
  /// it among the retry names.
  using Retry = kiln::includes::IncludeHome::Retry;
  /// The retry, when the log names a header that this request has not retried yet, fewer than
  /// kMaxRetries were made, and a folder has it (the new resolve read more headers than `resolved`);
  /// else nullopt (the error stands). After a lean set (ResolvedIncludes::lean) whose compile asked for a
  /// header, the retry is once with every branch (`full`), with the name unless it is an untaken one:
  /// at most one more compile. A real name that no folder has is the user's error at once (the full set's
  /// compile would stop at the same include). Throws IncludeError (from the resolve).
  [[nodiscard]] std::optional<Retry> retry(const SettleInput& input, const ResolvedIncludes& resolved,
                                           std::string_view compile_log);

  /// Records what a resolve read in the request's manifest, after its entry (`entry_hash`) was found or
  /// compiled, so the next request is settled by stat, and publishes the manifest to the storage's
  /// remotes (queued). Nothing for null `resolved` (settled by the manifest, which is recorded and
  /// refreshed already). Never throws.
  void record(const Hash128& request_hash, std::string_view request_canonical, const ResolvedIncludes* resolved,
              const Hash128& entry_hash) noexcept;

 private:
  /// A resolve, counted in `include_resolves` when one ran and `count`. `source_scan`: the caller's scan of
  /// the source (the one a settle or retry makes); null: the resolve makes it.
  Settled resolve(const SettleInput& input, std::vector<std::string> retry_names, bool full, bool count = true,
                  const ScanResult* source_scan = nullptr);
  /// The manifest's lookup for the request (said at debug level): the result key, with its dependency
  /// part in `dependency_part`, or nullopt (`looked` says why).
  std::optional<Hash128> look_up(const SettleInput& input, LookupStats& looked, std::string& dependency_part);
  /// The first level of settle(): the manifest's answer (fetched from the remotes when there is none
  /// here), or nullopt. `scanned` gives the source's scan, made when first needed.
  template <class Scanned>
  std::optional<Settled> by_manifest(const SettleInput& input, const Scanned& scanned);

  /// Whether requests take the lean walk: KILN_LEAN_HEADERS (on unless 0 or off).
  [[nodiscard]] static bool lean_from_environment();

  DependencyManifests& m_manifests;
  Storage* const m_storage = nullptr;  ///< the remotes' way, when constructed with a storage
  AtomicCounters& m_counters;
  HeaderFileCache m_files;  ///< headers the resolves of this engine read (by path and stat)
  ResolvedSets m_sets;      ///< its resolves, for later requests over the same includes
  const bool m_lean;        ///< lean walks (KILN_LEAN_HEADERS)
  /// Signatures of lean walks whose compile asked for a header the walk left behind: the requests with
  /// them are resolved in full at once (one failed compile per prelude, not per kernel).
  std::mutex m_lean_failed_mutex;
  std::unordered_set<Hash128, Hash128Hasher> m_lean_failed;
};

}  // namespace kiln::cache::detail
