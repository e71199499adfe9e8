#pragma once
// Small advisory files kept under the cache root beside the entries: today the compiler probes the
// engine remembers (engine/src/compiler_probe.cpp), in <root>/compilers/. They are not entries: never
// listed, verified, exported or counted, and anything wrong with one (absent, damaged, planted,
// unreadable) reads as "absent", so the caller falls back to doing the work it would have skipped.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/cache/store.hpp"

namespace kiln::cache {

/// The file's bytes, or nullopt when the store has no disk, the directory or file is not one this user
/// alone can write (a symlink, another owner, group/world-writable), it is larger than `max_bytes`, or
/// reading fails. `name` is a plain file name (no '/').
[[nodiscard]] std::optional<std::string> read_side_file(const Store& store, std::string_view name,
                                                        std::size_t max_bytes) noexcept;

/// Publishes the file atomically (temp + fsync + rename, mode 0600) when the store is read-write.
/// Returns false on any failure, which is never an error for the caller.
bool write_side_file(const Store& store, std::string_view name, std::string_view bytes) noexcept;

}  // namespace kiln::cache
