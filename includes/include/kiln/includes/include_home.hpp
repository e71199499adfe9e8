#pragma once
// The include home's one door (includes/): everything the engine asks of kiln's own #include resolution
// and the dependency manifests goes through this header; the rest of includes/ is private to it.
//
// A request whose compile could open files (include folders, or an include by absolute path or through a
// macro: opens_files_by_name) has a two-level key. The request key (every input but the headers' bytes)
// names a dependency manifest (dep_manifest.hpp); the entry key adds the dependency part, what the compile
// reads. IncludeHome settles that part once per request, by stat from the manifest when it still matches
// (checking itself that the manifest's answer is the request keyed with that part), else by resolving every
// include, and records what a resolve read once the entry is found or compiled. Manifests travel through
// the storage front end's remote tiers as opaque records: a recorded manifest is published, and a request
// with no manifest here asks the remotes for one before resolving; parsing and checking them is the home's.
// The engine builds the keys (make_key) and rethrows an IncludeError as its ConfigError.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/hash.hpp"
#include "kiln/cache/dependencies.hpp"
#include "kiln/cache/types.hpp"

namespace kiln::cache {
class Storage;
struct AtomicCounters;
}  // namespace kiln::cache

namespace kiln::includes {

using cache::Hash128;

/// A folder or header the include home cannot use (a folder that does not exist, a header too large or
/// unreadable, a toolkit without its headers). The engine reports it as a ConfigError with this message.
class IncludeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A header handed to the compiler in memory (the user's, kiln's embedded ones), as the home reads it:
/// views into the caller's header.
struct MemoryHeader {
  std::string_view name;
  std::string_view text;
};

/// A header as the compiler gets it. Its text is shared: a file's rewritten text stays with the file in
/// the home's header cache and serves every later resolve that rewrites it the same way, so a burst of
/// compiles over one tree does not copy the tree's bytes again for each kernel.
struct CompilerHeader {
  std::string name;
  std::string_view text;  ///< all of *storage (so NUL-terminated)
  std::shared_ptr<const std::string> storage;
};

/// What a resolve found (private to the home): held by the engine between settling and compiling.
struct ResolvedIncludes;

/// What the compiler gets for a resolved request: the source with its includes rewritten, the headers in
/// memory, and where the source's prelude ends (the raw offset past the last #include that follows code, 0
/// for none: the NVRTC lane moves that prefix into a header of its own so its PCH covers it). Views into
/// the resolve, valid while it lives.
struct CompilerView {
  std::string_view source;
  std::span<const CompilerHeader> headers;
  std::size_t prelude_end = 0;
};

/// What a request's compile reads, settled.
struct Settled {
  std::string dependency_part;  ///< canonical_dependencies of the set: the entry key's last part
  /// The resolve: what the compiler gets in memory. Null when the manifest settled the part by stat
  /// (then a compile resolves first).
  std::shared_ptr<const ResolvedIncludes> includes;
  bool resolved = false;  ///< a resolve ran for it (not a manifest's answer, nor a set taken from an earlier one)
};

/// What the include home must know of the compiler a request goes to, given by the engine (one per vendor,
/// from its vendor table: engine/src/vendor_table.cpp), so the home never asks which vendor a compiler is.
/// The defaults are NVRTC's.
struct CompilerTraits {
  /// The vendor's name ("cuda"): part of a kept resolve's signature (a set resolved for one compiler serves
  /// no other).
  std::string_view name = "cuda";
  /// The compiler opens an #include of an absolute path from the disk even when a header of that name is
  /// handed to it in memory (HIPRTC, as clang does): a header from a folder is handed over under its path
  /// without the leading '/', and a computed include that names an absolute path cannot be served. Else
  /// (NVRTC) the in-memory header of that very name is taken.
  bool opens_absolute_paths = false;
  /// Whose predefined macros the lean walk starts from (predefined.cpp): NVRTC's (__CUDACC__, __CUDA_ARCH__
  /// from -arch=, its version's, ...), or none known (a reserved name is then unknown, never undefined).
  enum class Predefined : std::uint8_t { none, nvrtc };
  Predefined predefined = Predefined::nvrtc;
};

/// A request as the include home takes it: views into the engine's request, valid during the call.
struct SettleInput {
  Hash128 request_hash;                ///< names the request's dependency manifest
  std::string_view request_canonical;  ///< the request key's bytes
  std::string_view source_name;
  std::string_view source_text;
  std::span<const MemoryHeader> memory_headers;
  std::span<const std::filesystem::path> folders;  ///< checked, in search order (IncludeHome::folders)
  CompilerTraits traits;                           ///< of the compiler the request goes to
  std::span<const std::string> retry_names;  ///< headers earlier compiles asked for (Retry::name)
  /// The request's complete compiler flags: its -D/-U, -std= and -arch= decide the lean walk's macros.
  std::span<const std::string> flags;
  std::string_view compiler;  ///< the compiler's identity the request key names ("nvrtc 13.0")
  /// Resolve every branch (a retry after a lean set's compile asked for a header it did not have).
  bool full = false;
  /// settle(): what resolve_ahead() gave for this request with these flags and this compiler, to take
  /// when the manifest does not settle it (instead of resolving again).
  const Settled* ahead = nullptr;
};

/// The entry key's hash of a request keyed with a dependency part: the request key's canonical bytes with
/// the part "dependencies" added (cache::CanonicalKey::add), hashed as CanonicalKey::hash() hashes, without
/// building the key. The engine's make_key adds that part the same way; a manifest's answer is taken only
/// when it is this.
[[nodiscard]] Hash128 entry_key_hash(std::string_view request_canonical, std::string_view dependency_part) noexcept;

/// Owned by the engine, one per engine: the header files its resolves read, its resolves (a request whose
/// resolve would be one made before takes that one, checked by stat), the dependency manifests of the
/// storage's cache root with their stat memo, and the storage's remotes for them. Counts into the engine's
/// counters: `manifest_hits` for a request settled by stat, `include_resolves` for every resolve that ran (one
/// taken from the held sets reads no header and is not counted). Thread-safe.
class IncludeHome {
 public:
  /// Retries of one request with a header its failed compile asked for (each costs a compiler run).
  static constexpr std::size_t kMaxRetries = 8;

  /// The manifests live beside `storage`'s local store and follow its mode (none for a memory-only store,
  /// read-only for a read-only one); its remotes carry them. Both borrowed: they outlive this object.
  IncludeHome(cache::Storage& storage, cache::AtomicCounters& counters);
  ~IncludeHome();
  IncludeHome(const IncludeHome&) = delete;
  IncludeHome& operator=(const IncludeHome&) = delete;

  /// The folders a request searches, in order: `include_dirs` (-I), then, with a `toolkit_library`, its
  /// toolkit's; each absolute, normal and checked to be a folder. Throws IncludeError.
  [[nodiscard]] std::vector<std::filesystem::path> folders(std::span<const std::filesystem::path> include_dirs,
                                                           const std::filesystem::path* toolkit_library) const;

  /// Settles which files the request reads: from its dependency manifest when `use_manifest`, every
  /// recorded header still has its stat (or its digest), every path probed empty is still empty and the
  /// manifest's answer is entry_key_hash() of the request with the part it names (no header is read;
  /// `includes` is null), else by resolving the includes. With no manifest here, the storage's remotes are
  /// asked for one first. Throws IncludeError (from a resolve).
  [[nodiscard]] Settled settle(const SettleInput& input, bool use_manifest);

  /// settle() by the manifest alone: its answer when it still matches by stat (asking the remotes for one
  /// when there is none here, as settle() does), else nullopt. Never resolves, so no header is read: what a
  /// planner that needs only the key asks (kiln prewarm's). Counts a manifest hit as settle() does.
  [[nodiscard]] std::optional<Settled> settle_by_manifest(const SettleInput& input);

  /// The resolve settle() would make without a manifest, made ahead (while the compiler loads, before the
  /// request key exists) and counted only when a settle() takes it (SettleInput::ahead). Throws IncludeError.
  [[nodiscard]] Settled resolve_ahead(const SettleInput& input);

  /// A retry after a failed compile: the header its log says the compiler could not open, and the request
  /// resolved again with it among the retry names.
  struct Retry {
    std::string name;   ///< the header asked for, to add to the retry names; empty for none
    bool full = false;  ///< the retry resolves every branch (SettleInput::full for this request)
    Settled settled;
  };
  /// The retry, when the log names a header that this request has not retried yet, fewer than kMaxRetries
  /// were made, and a folder has it; after a lean set, once with every branch. Else nullopt (the error
  /// stands). Throws IncludeError (from the resolve).
  [[nodiscard]] std::optional<Retry> retry(const SettleInput& input, const ResolvedIncludes& resolved,
                                           std::string_view compile_log);

  /// Records what a resolve read in the request's manifest, after its entry (`entry_hash`) was found or
  /// compiled, and publishes the manifest to the storage's remotes (queued). Nothing for null `resolved`.
  /// Never throws.
  void record(const Hash128& request_hash, std::string_view request_canonical, const ResolvedIncludes* resolved,
              const Hash128& entry_hash) noexcept;

  /// The dependency set the request's manifest recorded for the entry `entry_hash`; nullopt when the
  /// manifest does not hold it (changed or gone since it matched).
  [[nodiscard]] std::optional<cache::DependencySet> recorded(const Hash128& request_hash,
                                                             std::string_view request_canonical,
                                                             const Hash128& entry_hash) const;

  /// The bytes of the request's manifest as recorded here (what publish_stored sends to the remotes); nullopt
  /// when there is none. Never throws but std::bad_alloc.
  [[nodiscard]] std::optional<std::vector<std::byte>> manifest_bytes(const Hash128& request_hash) const;

  /// What the compiler gets for a resolve (views into `resolved`).
  [[nodiscard]] static CompilerView compiler_view(const ResolvedIncludes& resolved) noexcept;
  /// What a resolve read: the headers and the places probed empty.
  [[nodiscard]] static const cache::DependencySet& dependencies(const ResolvedIncludes& resolved) noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

/// Whether `text` (a source or an in-memory header) has an include the compiler would open from the disk
/// whatever folders it is given: one by an absolute path, or a computed one (#include MACRO). Such a request
/// reads files: the home resolves its includes. Cheap for a text without the word "include".
[[nodiscard]] bool opens_files_by_name(std::string_view text);

/// Where the prelude of a source that no resolve rewrote ends (CompilerView::prelude_end): one scan.
[[nodiscard]] std::size_t prelude_end(std::string_view source);

/// The header a failed compile could not open, from its log: NVRTC's `cannot open source file "x"` (or
/// `could not open ...`), clang's (HIPRTC's) `'x' file not found`. nullopt when the log has none.
[[nodiscard]] std::optional<std::string> missing_include_from_log(std::string_view log);

/// A sentence for a CompileError about a header that was not found: where kiln looked.
[[nodiscard]] std::string describe_missing_include(std::string_view name,
                                                   std::span<const std::filesystem::path> folders);

/// `log` with each line the compiler echoes from a source or header that is an #include directive shown as
/// the file has it instead of as the home rewrote it (the compiler quotes the text it was given).
[[nodiscard]] std::string restore_include_spellings(std::string log, std::string_view source_name,
                                                    std::string_view source_text);

}  // namespace kiln::includes
