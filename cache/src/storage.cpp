#include "kiln/cache/storage.hpp"

#include <fmt/format.h>

#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "kiln/base/hot_path.hpp"
#include "kiln/base/log.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/pack.hpp"
#include "kiln/cache/remote.hpp"

namespace kiln::cache {

std::string_view to_string(TierKind kind) noexcept {
  switch (kind) {
    case TierKind::pack:
      return "pack";
    case TierKind::remote:
      return "remote";
  }
  return "?";
}

std::string_view to_string(HitOrigin origin) noexcept {
  switch (origin) {
    case HitOrigin::local:
      return "local";
    case HitOrigin::pack:
      return "pack";
    case HitOrigin::remote:
      return "remote";
  }
  return "?";
}

namespace {

/// `error` without a leading "remote cache <url>: ": whoever shows it names the tier already.
std::string without_subject(std::string error) {
  constexpr std::string_view kSubject = "remote cache ";
  if (!error.starts_with(kSubject)) return error;
  const std::size_t colon = error.find(": ", kSubject.size());
  if (colon == std::string::npos || error.find(' ', kSubject.size()) < colon) return error;
  return error.substr(colon + 2);
}

}  // namespace

std::vector<OpenedTier> open_tiers(const StorageConfig& config) {
  std::vector<OpenedTier> opened;
  for (const std::string& pack : config.packs) {
    OpenedTier slot{TierKind::pack, pack, nullptr, {}};
    try {
      slot.tier = open_pack(pack);
    } catch (const std::exception& e) {
      slot.error = e.what();
    }
    opened.push_back(std::move(slot));
  }
  for (const std::string& url : split_remote_urls(config.remote_url)) {
    OpenedTier slot{TierKind::remote, redact_remote_url(url), nullptr, {}};
    try {
      RemoteConfig remote_config = remote_config_from_environment(url);
      if (!config.tier_leases) remote_config.lease_wait = std::chrono::milliseconds(0);
      std::unique_ptr<RemoteTier> remote = open_remote(remote_config);
      slot.location = remote->config().display();  // never the password
      slot.tier = std::move(remote);
    } catch (const std::exception& e) {
      slot.error = without_subject(e.what());
    }
    opened.push_back(std::move(slot));
  }
  return opened;
}

// ---- Reservation -----------------------------------------------------------------------------------

Reservation::Reservation(Reservation&& other) noexcept
    : m_storage(std::exchange(other.m_storage, nullptr)), m_key(other.m_key), m_lease(std::move(other.m_lease)) {}

Reservation& Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    abandon();
    m_storage = std::exchange(other.m_storage, nullptr);
    m_key = other.m_key;
    m_lease = std::move(other.m_lease);
  }
  return *this;
}

bool Reservation::put(const Entry& entry) noexcept {
  if (m_storage == nullptr) return false;
  Storage& storage = *std::exchange(m_storage, nullptr);
  const bool stored = storage.put_local(entry);
  // The lease goes before the tiers hear of it: local waiters can read the entry now.
  m_lease.release();
  storage.publish_to_tiers(entry);
  return stored;
}

void Reservation::abandon() noexcept {
  if (m_storage == nullptr) return;
  Storage& storage = *std::exchange(m_storage, nullptr);
  for (const auto& slot : storage.m_tiers) slot.tier->abandon(m_key);
  m_lease.release();
}

// ---- Storage ---------------------------------------------------------------------------------------

Storage::Storage(StorageConfig config)
    : m_config(std::move(config)),
      m_local(m_config.local) {
  // Read-through tiers under the local store: packs, then the remote. A tier that cannot be opened is
  // left out with one warning; it never fails the caller.
  for (OpenedTier& opened : open_tiers(m_config)) {
    if (!opened.tier) {
      if (opened.kind == TierKind::pack) {
        KILN_LOG(warn, "{}; continuing without this pack", opened.error);
      } else {
        KILN_LOG(warn, "remote cache {}: {}; continuing without it", opened.location, opened.error);
      }
      continue;
    }
    add_tier(opened.kind, std::move(opened.tier));
  }
}

Storage::~Storage() { close_tiers(); }

void Storage::close_tiers() noexcept {
  if (m_tiers_closed.exchange(true)) return;
  // One start for all: each tier's thread drains its queue while an earlier tier is joined, so the
  // whole close takes about the longest close_flush, not their sum.
  const auto start = std::chrono::steady_clock::now();
  for (RemoteTier* remote : m_remotes) remote->close(start + remote->config().close_flush);
  // Each remote tier's lifetime counters, beside the cache's own (kiln cache stats shows them), now
  // that its publishes are counted. Only a store that writes records them; a failed write is never an
  // error.
  if (m_local.mode() != StoreMode::read_write) return;
  for (RemoteTier* remote : m_remotes) {
    record_tier_stats(m_local.config().root, remote->config().display(), remote->remote_stats());
  }
}

void Storage::add_tier(TierKind kind, std::unique_ptr<Tier> tier) {
  if (!tier) throw std::invalid_argument("Storage::add_tier: no tier");
  if (kind == TierKind::remote) {
    auto* remote = dynamic_cast<RemoteTier*>(tier.get());
    if (remote == nullptr) throw std::invalid_argument("Storage::add_tier: a remote tier must be a RemoteTier");
    m_remotes.push_back(remote);
    if (m_remote == nullptr) m_remote = remote;
  }
  m_tiers.push_back(TierSlot{kind, std::move(tier)});
}

KILN_HOT std::shared_ptr<const Entry> Storage::get_local(const Hash128& key, std::string_view canonical_key) {
  LookupResult found = m_local.get(key, canonical_key);
  if (found.outcome == LookupOutcome::corrupt_removed) {
    m_counters.add({.corrupt_removed = 1});
    KILN_LOG(warn, "cache entry {} was damaged ({}); removed, recompiling", key.hex(), found.detail);
  }
  if (found.outcome != LookupOutcome::hit || !found.entry) return nullptr;
  m_counters.add({.disk_hits = 1, .bytes_read = found.entry->payload.size() + found.entry->aux.size()});
  return std::make_shared<const Entry>(std::move(*found.entry));
}

std::variant<Found, Reservation> Storage::get_or_reserve(const Hash128& key, std::string_view canonical_key,
                                                         bool refresh) {
  if (!refresh) {
    // Read again: another thread may have published it since the caller's get_local().
    if (auto entry = get_local(key, canonical_key)) return Found{std::move(entry), HitOrigin::local, false};
    if (auto found = find_in_tiers(key, canonical_key)) return std::move(*found);
  }
  // One compile per key across processes: wait for another process's compile, then re-read.
  Reservation reservation(*this, key, m_local.acquire_lease(key, m_config.lease_wait));
  if (!reservation.lease_owned() && !refresh) {
    if (auto entry = get_local(key, canonical_key)) {
      reservation.abandon();  // another local process compiled it: the tiers' reservations are not needed
      return Found{std::move(entry), HitOrigin::local, false};  // a hit (counted there), not a miss
    }
  }
  m_counters.add({.misses = 1});  // only what this process goes on to compile
  return reservation;
}

std::optional<Found> Storage::find_in_tiers(const Hash128& key, std::string_view canonical_key) {
  for (std::size_t i = 0; i < m_tiers.size(); ++i) {
    const TierSlot& slot = m_tiers[i];
    LookupResult found = slot.tier->get(key, canonical_key);
    if (found.outcome != LookupOutcome::hit || !found.entry) continue;
    auto entry = std::make_shared<const Entry>(std::move(*found.entry));
    if (slot.kind != TierKind::remote) m_counters.add({.disk_hits = 1});  // the remotes count their own
    // Back-fill: every remote asked before this one missed (or failed) and gets the verified entry (a
    // refused one never gets here). Queued, so the caller does not wait; a Redis tier's publish also
    // releases the compile lease its miss took.
    if (slot.kind == TierKind::remote) {
      for (std::size_t j = 0; j < i; ++j) {
        if (m_tiers[j].kind == TierKind::remote) m_tiers[j].tier->publish(*entry);
      }
    }
    const bool stored = m_local.put(*entry);
    KILN_LOG(debug, "{} served {} (copied to the local cache: {})", slot.tier->describe(), key.hex(), stored);
    return Found{std::move(entry), slot.kind == TierKind::remote ? HitOrigin::remote : HitOrigin::pack, stored};
  }
  return std::nullopt;
}

std::optional<Found> Storage::find(const Hash128& key, std::string_view canonical_key) {
  if (auto entry = get_local(key, canonical_key)) return Found{std::move(entry), HitOrigin::local, false};
  if (auto found = find_in_tiers(key, canonical_key)) return found;
  // No compile follows this miss: a tier that took a lease for one (the remote) lets it go now.
  for (const auto& slot : m_tiers) slot.tier->abandon(key);
  return std::nullopt;
}

bool Storage::put_local(const Entry& entry) noexcept {
  const bool stored = m_local.put(entry);
  if (stored) m_counters.add({.bytes_written = entry.payload.size() + entry.aux.size()});
  return stored;
}

void Storage::publish_to_tiers(const Entry& entry) noexcept {
  for (const auto& slot : m_tiers) slot.tier->publish(entry);
}

bool Storage::store(const Entry& entry) noexcept {
  const bool stored = put_local(entry);
  publish_to_tiers(entry);
  return stored;
}

bool Storage::remove(const Hash128& key) noexcept {
  const bool removed = m_local.remove(key);
  for (RemoteTier* remote : m_remotes) (void)remote->remove(key);
  return removed;
}

bool Storage::fetch_manifest(const Hash128& request_key, const ManifestCheck& check,
                             const ManifestInstall& install) noexcept {
  for (std::size_t i = 0; i < m_remotes.size(); ++i) {
    const ManifestFetch fetched = m_remotes[i]->get_manifest(request_key, check);
    if (fetched.outcome != ManifestFetch::Outcome::hit) continue;
    // The caller checks it all again (the include home: against the canonical key and the request's
    // scope) and refuses it when a manifest was recorded here meanwhile.
    std::string refused = "not installed";
    try {
      refused = install(fetched.bytes);
    } catch (...) {  // std::bad_alloc: not taken
    }
    try {
      KILN_LOG(debug, "{} served the dependency manifest of {} ({} bytes): {}", m_remotes[i]->describe(),
               request_key.hex(), fetched.bytes.size(), refused.empty() ? "installed" : refused);
    } catch (...) {
    }
    if (!refused.empty()) return false;
    for (std::size_t j = 0; j < i; ++j) m_remotes[j]->publish_manifest(request_key, fetched.bytes);
    return true;
  }
  return false;
}

void Storage::publish_manifest(const Hash128& request_key, std::span<const std::byte> bytes) noexcept {
  if (bytes.empty()) return;
  for (RemoteTier* remote : m_remotes) remote->publish_manifest(request_key, bytes);
}

StoredPublish Storage::publish_stored(std::span<const Hash128> keys, const ManifestBytes& manifest_bytes) {
  StoredPublish done;
  // Tiers of this call's own, without leases (a put releases none, and nothing is compiled after a miss),
  // so this storage's remotes count only what the engine did.
  std::vector<std::unique_ptr<RemoteTier>> remotes;
  for (const std::string& url : split_remote_urls(m_config.remote_url)) {
    RemoteConfig config = remote_config_from_environment(url);
    config.lease_wait = std::chrono::milliseconds(0);
    remotes.push_back(open_remote(config));
    done.urls += (done.urls.empty() ? "" : ", ") + config.display();
  }
  const auto put_all = [&](const auto& put) {
    bool all = true;
    for (const auto& remote : remotes) {
      std::string why;
      if (!put(*remote, why)) {
        all = false;
        done.reasons.insert(remotes.size() > 1 ? remote->config().display() + ": " + why : why);
      }
    }
    return all;
  };
  std::unordered_set<Hash128, Hash128Hasher> manifests_done;
  for (const Hash128& key : keys) {
    auto read = m_local.read_entry(key);
    auto* entry = std::get_if<Entry>(&read);
    if (entry == nullptr) {
      ++done.failed;
      done.reasons.insert("local entry unreadable: " + std::get<ContentError>(read).reason);
      continue;
    }
    bool all = put_all([&](RemoteTier& remote, std::string& why) { return remote.put(*entry, &why); });
    // A request with include folders: its dependency manifest too, once per request.
    bool two_level = false;
    const std::optional<std::vector<KeyPart>> parts = CanonicalKey::parse(entry->canonical_key);
    const Hash128 request = parts ? request_key_of(*parts, &two_level).hash() : Hash128{};
    if (two_level && manifests_done.insert(request).second) {
      if (const auto bytes = manifest_bytes(request)) {
        const bool put =
            put_all([&](RemoteTier& remote, std::string& why) { return remote.put_manifest(request, *bytes, &why); });
        if (put) ++done.manifests;
        all = all && put;
      }
    }
    ++(all ? done.written : done.failed);
  }
  return done;
}

void Storage::discard(const Hash128& key) noexcept {
  m_local.remove(key);
  m_counters.add({.corrupt_removed = 1});
}

Counters Storage::counters() const noexcept {
  Counters counters = m_counters.snapshot();
  counters.evictions += m_local.evictions();
  for (const RemoteTier* remote : m_remotes) counters += remote->counters();
  return counters;
}

}  // namespace kiln::cache
