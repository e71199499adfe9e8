// Dependency manifests in the remote tiers: what both backends share (remote_manifest.hpp).
#include "remote_manifest.hpp"

#include <fmt/format.h>

#include <variant>

#include "kiln/base/log.hpp"

namespace kiln::cache::detail {

Hash128 manifest_object_key(const Hash128& request_key) noexcept {
  return hash128(request_key.hex(), kRemoteManifestSeed);
}

void ManifestCounters::count(const ManifestFetch& fetched) noexcept {
  switch (fetched.outcome) {
    case ManifestFetch::Outcome::hit:
      hits.fetch_add(1, std::memory_order_relaxed);
      break;
    case ManifestFetch::Outcome::miss:
      misses.fetch_add(1, std::memory_order_relaxed);
      break;
    case ManifestFetch::Outcome::refused:
      refused.fetch_add(1, std::memory_order_relaxed);
      break;
    case ManifestFetch::Outcome::error:
      break;
  }
}

ManifestFetch ManifestCounters::refuse(std::string_view display, std::string_view where, std::string_view why,
                                       bool deleted) noexcept {
  ManifestFetch fetched;
  fetched.outcome = ManifestFetch::Outcome::refused;
  try {
    const std::string text = fmt::format("remote cache {}: refused the dependency manifest at {}: {}; {} it", display,
                                         where, why, deleted ? "deleted" : "could not delete");
    if (!warned.exchange(true)) {
      KILN_LOG(warn, "{} (the request resolves its includes instead; further refusals are counted as manifest_refused "
               "and said at debug level)", text);
    } else {
      KILN_LOG(debug, "{}", text);
    }
    fetched.detail = text;
  } catch (...) {
  }
  return fetched;
}

void ManifestCounters::report(RemoteStats& stats) const noexcept {
  stats.manifest_hits = hits.load(std::memory_order_relaxed);
  stats.manifest_misses = misses.load(std::memory_order_relaxed);
  stats.manifest_refused = refused.load(std::memory_order_relaxed);
  stats.manifests_published = published.load(std::memory_order_relaxed);
}

}  // namespace kiln::cache::detail
