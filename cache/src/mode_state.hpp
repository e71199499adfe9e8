#pragma once
// Private to cache/: the mode of a part that writes under the cache root (the entry store, the dependency
// manifests). It only ever degrades (read_write -> read_only -> memory_only), the first reason for each
// step is kept, and each step is said once.
#include <atomic>
#include <mutex>
#include <string>

#include "kiln/base/log.hpp"
#include "kiln/cache/store.hpp"

namespace kiln::cache::detail {

/// Moves `mode` to `to` when that is a worse mode than the current one (from any thread), keeps `why`
/// in `reason` and logs "<what> is <mode>: <why>", at warn or info. A step to a mode no worse does nothing.
inline void degrade_mode(std::atomic<StoreMode>& mode, std::mutex& reason_mutex, std::string& reason,
                         std::string_view what, StoreMode to, const std::string& why, bool warn) {
  StoreMode current = mode.load();
  while (static_cast<int>(current) < static_cast<int>(to)) {
    if (mode.compare_exchange_weak(current, to)) {
      {
        const std::lock_guard lock(reason_mutex);
        reason = why;
      }
      if (warn) {
        KILN_LOG(warn, "{} is {}: {}", what, to_string(to), why);
      } else {
        KILN_LOG(info, "{} is {}: {}", what, to_string(to), why);
      }
      return;
    }
  }
}

}  // namespace kiln::cache::detail
