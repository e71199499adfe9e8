#pragma once
// A request as the engine works on it: the source, target, names and vendor flags it was made from,
// and the key made of them (make_request, make_key). Shared by the parts of the engine that build,
// settle, compile and load requests.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine_internal.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/includes/include_home.hpp"
#include "kiln/source.hpp"
#include "kiln/tooling/targets.hpp"

namespace kiln::detail {

struct EngineCore::Request {
  Request(Source source_in, Target target_in, std::vector<std::string> names_in)
      : source(std::move(source_in)), target(std::move(target_in)), names(std::move(names_in)) {}
  Source source;
  Target target;
  std::vector<std::string> names;  // sorted, unique: the name expressions given to the compiler (and the key)
  /// The plain names of the source's extern "C" kernels (sorted): found in the binary by their symbol, so
  /// neither given to the compiler nor in the key (EngineCore::take_c_kernels, c_kernels.hpp).
  std::vector<std::string> by_symbol;
  /// Every name as the caller asked: `names` and `by_symbol`, sorted.
  [[nodiscard]] std::vector<std::string> requested_names() const;
  std::vector<std::string> flags;  // complete vendor flags
  std::string compiler;  // the identity the key was made with
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
  /// the manifest (a hit by stat) or the resolver. Empty while not settled (settle_includes); `key` then
  /// is the request key.
  std::string dependency_part;
  /// The resolver's output (what the compiler gets in memory). Null after a manifest hit: a compile
  /// resolves again first (obtain_uncached).
  std::shared_ptr<const kiln::includes::ResolvedIncludes> includes;
  /// Headers a failed compile asked for that the scan could not see (retry_with_missing_header).
  std::vector<std::string> retry_names;
  /// Resolve every branch, not the lean walk's: its compile asked for a header the lean set left out.
  bool full_headers = false;
  /// The includes resolved while the compiler loaded (EngineCore::resolve_ahead), for the identity the
  /// key names: the first settle takes them unless the manifest settles the request.
  std::optional<kiln::includes::Settled> ahead;
  cache::CanonicalKey key;  ///< the entry's key: with include folders, request_key + the dependencies
  cache::Hash128 hash;
};

}  // namespace kiln::detail
