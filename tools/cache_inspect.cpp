// What `kiln cache show`, `export` and `why-miss` ask about an entry (cache_inspect.hpp).
#include "cache_inspect.hpp"

#include <fmt/format.h>

#include "kiln/includes/dep_manifest.hpp"

namespace kiln::cli {

namespace fs = std::filesystem;

/// Why the engine would not use the entry file at `path` whatever its bytes: the cache root is refused
/// (the store is memory-only), or the file or its shard directory is not ours or is group/world-
/// writable. Empty when it would. Asks the store's own scan (the rule the engine applies), for the one
/// shard directory that holds the file.
std::string entry_refusal(const cache::Store& store, const cache::Hash128& key, const fs::path& path) {
  if (store.refused()) return store.mode_reason();
  std::string why;
  store.scan_shard(static_cast<unsigned>(key.high >> 56), cache::ScanDepth::header, /*with_mtime=*/true,
                   [&](const cache::ScannedEntry& e) {
                     if (e.path == path.string() && !e.refused.empty()) why = fmt::format("refused: {}", e.refused);
                   });
  return why;
}

/// For an entry of a request with include folders (its key ends in a "dependencies" part, which holds
/// only their digest): the headers and absent paths its request's dependency manifest recorded for it.
/// nullopt when the key has no such part, or the manifest is not here (an entry from a pack or another
/// cache) or no longer holds this result.
std::optional<cache::DependencySet> recorded_dependencies(const cache::Store& store,
                                                          const std::vector<cache::KeyPart>& parts,
                                                          const cache::Hash128& entry_key) {
  bool two_level = false;
  const cache::CanonicalKey request_key = cache::request_key_of(parts, &two_level);
  if (!two_level || store.mode() == cache::StoreMode::memory_only) return std::nullopt;
  const cache::DependencyManifests manifests(store.config().root, /*read_only=*/true);
  return manifests.recorded(request_key.hash(), request_key.bytes(), entry_key);
}

}  // namespace kiln::cli
