#pragma once
// Private to cache/: dependency manifests in the remote tiers (remote.hpp, "Dependency manifests"). What
// both backends share, so each keeps only its transport: the name a request's manifest is kept under and
// the manifest counters. A manifest is an opaque record here: whether bytes are the request's manifest is
// the caller's check (ManifestCheck, the include home's). Plain code: built with or without
// hiredis and libcurl.
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kiln/base/hash.hpp"
#include "kiln/cache/remote.hpp"

namespace kiln::cache::detail {

/// The seed of manifest_object_key(): differs from kKeySeed (entry keys) and every checksum seed.
inline constexpr std::uint64_t kRemoteManifestSeed = 0x6b696c6e2d726d66ULL;  // "kiln-rmf"

/// The key a request's manifest is kept under in a remote tier (the backends name it as they name an
/// entry's key: RemoteConfig::entry_key, mac_key, object_path): XXH3-128 of the request key's 32 hex
/// digits under kRemoteManifestSeed. An entry's key is XXH3-128 of a canonical key under kKeySeed, so the
/// two meet only by a 128-bit collision, and even then the MAC's label and the content check tell them
/// apart.
[[nodiscard]] Hash128 manifest_object_key(const Hash128& request_key) noexcept;

/// A tier's manifest counters (RemoteStats' manifest fields).
struct ManifestCounters {
  std::atomic<std::uint64_t> hits{0}, misses{0}, refused{0}, published{0};
  std::atomic<bool> warned{false};
  /// Counts one get_manifest() answer (an error is the breaker's to count).
  void count(const ManifestFetch& fetched) noexcept;
  /// The answer for a refused manifest (at `where` on the tier `display`, `deleted` or not), said as a
  /// warning the first time for this tier and at debug level afterwards (whoever can write to the
  /// server can plant many; each is counted).
  [[nodiscard]] ManifestFetch refuse(std::string_view display, std::string_view where, std::string_view why,
                                     bool deleted) noexcept;
  /// Copies the counters into `stats`.
  void report(RemoteStats& stats) const noexcept;
};

/// get_manifest()'s frame for both backends: runs `fetch` (the backend's lookup), turns an exception
/// into an error answer, counts the answer. Never throws.
template <class Fetch>
[[nodiscard]] ManifestFetch counted_manifest_fetch(ManifestCounters& counters, const Fetch& fetch) noexcept {
  ManifestFetch fetched;
  try {
    fetched = fetch();
  } catch (...) {  // std::bad_alloc: an error, never the request's failure
    fetched.outcome = ManifestFetch::Outcome::error;
    fetched.bytes.clear();
  }
  counters.count(fetched);
  return fetched;
}

}  // namespace kiln::cache::detail
