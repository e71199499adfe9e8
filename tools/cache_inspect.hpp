#pragma once
// What `kiln cache show` and `kiln cache why-miss` (why_miss.cpp) both ask about an entry.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "kiln/cache/dependencies.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/store.hpp"

namespace kiln::cli {

/// Why the engine would not use the entry file at `path` whatever its bytes: the cache root is refused
/// (the store is memory-only), or the file or its shard directory is not ours or is group/world-
/// writable. Empty when it would.
[[nodiscard]] std::string entry_refusal(const cache::Store& store, const cache::Hash128& key,
                                        const std::filesystem::path& path);

/// For an entry of a request with include folders (its key ends in a "dependencies" part, which holds
/// only their digest): the headers and absent paths its request's dependency manifest recorded for it.
/// nullopt when the key has no such part, or the manifest is not here or no longer holds this result.
[[nodiscard]] std::optional<cache::DependencySet> recorded_dependencies(const cache::Store& store,
                                                                        const std::vector<cache::KeyPart>& parts,
                                                                        const cache::Hash128& entry_key);

/// Registers `kiln cache why-miss` under `cache` (why_miss.cpp).
void add_why_miss_command(CLI::App& cache, Commands& commands);

}  // namespace kiln::cli
