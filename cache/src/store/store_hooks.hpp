#pragma once
// Test-only hooks into the store, kept out of the public StoreConfig. A Store takes the hooks set in
// this process when it is constructed; tests set them (StoreHooksScope) around the stores they make.
// Not thread-safe: set them before making the stores that should see them.
#include <functional>
#include <vector>

#include "kiln/base/hash.hpp"
#include "kiln/cache/store.hpp"

namespace kiln::cache::detail {

struct StoreHooks {
  /// Maps a key hash to the hash used for the file name (forces file-name collisions).
  std::function<Hash128(const Hash128&)> file_name;
  /// Called by trim() after it has scanned and sorted the entries (oldest first), before it deletes
  /// any (lets a test touch an entry between the scan and the delete).
  std::function<void(const std::vector<EntryFile>&)> trim_scan;
};

/// One hook set, the other left empty.
[[nodiscard]] inline StoreHooks file_name_hook(std::function<Hash128(const Hash128&)> fn) {
  StoreHooks hooks;
  hooks.file_name = std::move(fn);
  return hooks;
}
[[nodiscard]] inline StoreHooks trim_scan_hook(std::function<void(const std::vector<EntryFile>&)> fn) {
  StoreHooks hooks;
  hooks.trim_scan = std::move(fn);
  return hooks;
}

/// The hooks stores constructed from now on take.
void set_store_hooks(StoreHooks hooks);
[[nodiscard]] StoreHooks current_store_hooks();

/// Sets hooks for its lifetime, then clears them.
class StoreHooksScope {
 public:
  explicit StoreHooksScope(StoreHooks hooks) { set_store_hooks(std::move(hooks)); }
  ~StoreHooksScope() { set_store_hooks({}); }
  StoreHooksScope(const StoreHooksScope&) = delete;
  StoreHooksScope& operator=(const StoreHooksScope&) = delete;
};

}  // namespace kiln::cache::detail
