// The storage front end (cache::Storage) driven directly, with synthetic entries: the local fast path,
// tier hits copied into the local store, reservations that publish or abandon, the compile lease, a
// read-only local store, tiers that cannot be opened. No compiler, no GPU.
#include <algorithm>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <variant>

#include "cache_test_support.hpp"
#include "kiln/includes/dep_manifest.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/pack.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/cache/storage.hpp"

using namespace kiln_test;
using namespace std::chrono_literals;
using kiln::cache::Counters;
using kiln::cache::Found;
using kiln::cache::HitOrigin;
using kiln::cache::LookupResult;
using kiln::cache::Reservation;
using kiln::cache::Storage;
using kiln::cache::StorageConfig;
using kiln::cache::TierKind;

namespace {

/// What a fake tier was asked, shared with the test (the tier itself is owned by the Storage).
struct TierLog {
  std::mutex mutex;
  std::size_t gets = 0;
  std::vector<Hash128> published;
  std::vector<Hash128> abandoned;
  std::optional<Entry> serves;  ///< answered as a hit when its key is asked

  std::size_t get_count() {
    const std::lock_guard lock(mutex);
    return gets;
  }
  std::vector<Hash128> publishes() {
    const std::lock_guard lock(mutex);
    return published;
  }
  std::vector<Hash128> abandons() {
    const std::lock_guard lock(mutex);
    return abandoned;
  }
};

class FakeTier : public kiln::cache::Tier {
 public:
  explicit FakeTier(std::shared_ptr<TierLog> log) : m_log(std::move(log)) {}
  [[nodiscard]] std::string describe() const override { return "fake tier"; }
  [[nodiscard]] LookupResult get(const Hash128& key, std::string_view canonical_key) override {
    const std::lock_guard lock(m_log->mutex);
    ++m_log->gets;
    if (m_log->serves && m_log->serves->key_hash == key && m_log->serves->canonical_key == canonical_key) {
      return LookupResult{LookupOutcome::hit, *m_log->serves, {}};
    }
    return LookupResult{LookupOutcome::miss, std::nullopt, {}};
  }
  void publish(const Entry& entry) noexcept override {
    const std::lock_guard lock(m_log->mutex);
    m_log->published.push_back(entry.key_hash);
  }
  void abandon(const Hash128& key) noexcept override {
    const std::lock_guard lock(m_log->mutex);
    m_log->abandoned.push_back(key);
  }

 protected:
  std::shared_ptr<TierLog> m_log;
};

/// A remote stand-in: a fake tier that reports remote counters of its own.
class FakeRemote final : public kiln::cache::RemoteTier {
 public:
  explicit FakeRemote(std::shared_ptr<TierLog> log) : m_tier(std::move(log)) {}
  [[nodiscard]] std::string describe() const override { return "fake remote"; }
  [[nodiscard]] std::string_view backend() const noexcept override { return "fake"; }
  [[nodiscard]] bool fleet_lease() const noexcept override { return false; }
  [[nodiscard]] LookupResult get(const Hash128& key, std::string_view canonical_key) override {
    LookupResult found = m_tier.get(key, canonical_key);
    (found.outcome == LookupOutcome::hit ? m_hits : m_misses) += 1;
    return found;
  }
  void publish(const Entry& entry) noexcept override { m_tier.publish(entry); }
  void abandon(const Hash128& key) noexcept override { m_tier.abandon(key); }
  [[nodiscard]] const kiln::cache::RemoteConfig& config() const noexcept override { return m_config; }
  [[nodiscard]] Counters counters() const noexcept override {
    Counters counters;
    counters.remote_hits = m_hits;
    counters.remote_misses = m_misses;
    return counters;
  }
  [[nodiscard]] kiln::cache::RemoteStats remote_stats() const noexcept override { return {}; }
  bool ping(std::string* /*detail*/) noexcept override { return true; }
  bool put(const Entry& /*entry*/, std::string* /*detail*/) noexcept override { return true; }
  bool flush(std::chrono::milliseconds /*max_wait*/) noexcept override { return true; }
  bool remove(const Hash128& /*key*/) noexcept override { return false; }
  [[nodiscard]] kiln::cache::ManifestFetch get_manifest(const Hash128& request_key,
                                                        const kiln::cache::ManifestCheck& check) noexcept override {
    const auto it = manifests.find(request_key);
    if (it == manifests.end()) return {};
    if (std::string why = check(it->second); !why.empty()) {
      return {kiln::cache::ManifestFetch::Outcome::refused, {}, std::move(why)};
    }
    return {kiln::cache::ManifestFetch::Outcome::hit, it->second, {}};
  }
  void publish_manifest(const Hash128& request_key, std::span<const std::byte> bytes) noexcept override {
    manifests[request_key].assign(bytes.begin(), bytes.end());
  }
  bool put_manifest(const Hash128& request_key, std::span<const std::byte> bytes, std::string* /*detail*/) noexcept override {
    publish_manifest(request_key, bytes);
    return true;
  }

  /// The manifests it holds, by request key.
  std::unordered_map<Hash128, std::vector<std::byte>, kiln::cache::Hash128Hasher> manifests;

 private:
  FakeTier m_tier;
  kiln::cache::RemoteConfig m_config;
  std::uint64_t m_hits = 0;
  std::uint64_t m_misses = 0;
};

StorageConfig storage_config(const fs::path& root) {
  StorageConfig config;
  config.local = store_config(root);
  config.lease_wait = 2s;
  return config;
}

fs::path lease_file(const fs::path& root, const Hash128& key) { return root / "lock" / (key.hex() + ".lease"); }

}  // namespace

TEST_CASE("storage: a local hit needs no tier", "[cache]") {
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  auto log = std::make_shared<TierLog>();
  storage.add_tier(TierKind::pack, std::make_unique<FakeTier>(log));
  const Entry entry = make_entry("local", 2000);
  CHECK(storage.get_local(entry.key_hash, entry.canonical_key) == nullptr);
  REQUIRE(storage.local().put(entry));

  const auto hit = storage.get_local(entry.key_hash, entry.canonical_key);
  REQUIRE(hit);
  CHECK(hit->payload == entry.payload);
  auto looked_up = storage.get_or_reserve(entry.key_hash, entry.canonical_key);
  const auto* found = std::get_if<Found>(&looked_up);
  REQUIRE(found != nullptr);
  CHECK(found->origin == HitOrigin::local);
  CHECK_FALSE(found->stored);
  CHECK(found->entry->payload == entry.payload);
  CHECK(log->get_count() == 0);

  const Counters counters = storage.counters();
  CHECK(counters.disk_hits == 2);
  CHECK(counters.bytes_read == 2 * (entry.payload.size() + entry.aux.size()));
  CHECK(counters.misses == 0);
}

TEST_CASE("storage: a damaged local entry is removed, counted and warned about", "[cache]") {
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  const Entry entry = make_entry("damaged", 1000);
  REQUIRE(storage.local().put(entry));
  const fs::path path = storage.local().entry_path(entry.key_hash);
  std::vector<std::byte> bytes = read_bytes(path);
  bytes[bytes.size() / 2] ^= std::byte{0x5a};
  write_bytes(path, bytes);
  StderrCapture capture;
  CHECK(storage.get_local(entry.key_hash, entry.canonical_key) == nullptr);
  CHECK_FALSE(fs::exists(path));
  CHECK(capture.warnings() == 1);
  CHECK(capture.text().find("was damaged") != std::string::npos);
  CHECK(storage.counters().corrupt_removed == 1);
  CHECK(storage.counters().disk_hits == 0);
}

TEST_CASE("storage: a pack hit is copied into the local store", "[cache]") {
  TempDir dir;
  const Entry entry = make_entry("packed", 3000);
  const fs::path pack = dir.path() / "app.kpack";
  kiln::cache::write_pack(pack, {entry});
  StorageConfig config = storage_config(dir.path() / "cache");
  config.packs = {pack.string()};
  Storage storage(config);
  REQUIRE(storage.tier_count() == 1);
  CHECK(storage.remote() == nullptr);

  CHECK(storage.get_local(entry.key_hash, entry.canonical_key) == nullptr);
  auto looked_up = storage.get_or_reserve(entry.key_hash, entry.canonical_key);
  const auto* found = std::get_if<Found>(&looked_up);
  REQUIRE(found != nullptr);
  CHECK(found->origin == HitOrigin::pack);
  CHECK(found->stored);
  CHECK(found->entry->payload == entry.payload);
  CHECK(storage.counters().disk_hits == 1);  // the pack hit
  CHECK(storage.counters().misses == 0);

  // Now local: the next request is served by the fast path.
  const auto again = storage.get_local(entry.key_hash, entry.canonical_key);
  REQUIRE(again);
  CHECK(again->payload == entry.payload);
}

TEST_CASE("storage: a remote hit says so and is counted by the remote", "[cache]") {
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  auto pack_log = std::make_shared<TierLog>();
  auto remote_log = std::make_shared<TierLog>();
  storage.add_tier(TierKind::pack, std::make_unique<FakeTier>(pack_log));
  storage.add_tier(TierKind::remote, std::make_unique<FakeRemote>(remote_log));
  REQUIRE(storage.remote() != nullptr);
  CHECK_THROWS_AS(storage.add_tier(TierKind::remote, std::make_unique<FakeTier>(remote_log)), std::invalid_argument);

  const Entry entry = make_entry("remote", 1500);
  remote_log->serves = entry;
  auto looked_up = storage.get_or_reserve(entry.key_hash, entry.canonical_key);
  const auto* found = std::get_if<Found>(&looked_up);
  REQUIRE(found != nullptr);
  CHECK(found->origin == HitOrigin::remote);
  CHECK(found->stored);
  CHECK(pack_log->get_count() == 1);  // asked in order: the pack first
  const Counters counters = storage.counters();
  CHECK(counters.disk_hits == 0);  // not a disk hit: the remote counts its own
  CHECK(counters.remote_hits == 1);
  CHECK(storage.get_local(entry.key_hash, entry.canonical_key) != nullptr);
}

TEST_CASE("storage: a miss reserves; put publishes to the local store and every tier", "[cache]") {
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  auto log = std::make_shared<TierLog>();
  storage.add_tier(TierKind::pack, std::make_unique<FakeTier>(log));
  const Entry entry = make_entry("compiled", 4000);

  auto looked_up = storage.get_or_reserve(entry.key_hash, entry.canonical_key);
  auto* reservation = std::get_if<Reservation>(&looked_up);
  REQUIRE(reservation != nullptr);
  CHECK(reservation->lease_owned());
  CHECK(fs::exists(lease_file(dir.path(), entry.key_hash)));
  CHECK(log->get_count() == 1);
  CHECK(storage.counters().misses == 1);

  CHECK(reservation->put(entry));
  CHECK_FALSE(fs::exists(lease_file(dir.path(), entry.key_hash)));  // released
  CHECK(log->publishes() == std::vector<Hash128>{entry.key_hash});
  CHECK(log->abandons().empty());
  CHECK(storage.counters().bytes_written == entry.payload.size() + entry.aux.size());
  const auto hit = storage.get_local(entry.key_hash, entry.canonical_key);
  REQUIRE(hit);
  CHECK(hit->payload == entry.payload);

  CHECK_FALSE(reservation->put(entry));  // once only
  CHECK(log->publishes().size() == 1);
  looked_up = Reservation();  // destroying a used reservation abandons nothing
  CHECK(log->abandons().empty());
}

TEST_CASE("storage: a reservation dropped without put abandons", "[cache]") {
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  auto log = std::make_shared<TierLog>();
  storage.add_tier(TierKind::pack, std::make_unique<FakeTier>(log));
  const Entry entry = make_entry("failed", 1000);

  SECTION("destroyed") {
    {
      auto looked_up = storage.get_or_reserve(entry.key_hash, entry.canonical_key);
      REQUIRE(std::holds_alternative<Reservation>(looked_up));
      Reservation moved = std::move(std::get<Reservation>(looked_up));  // a moved-from one abandons nothing
      CHECK(moved.lease_owned());
      CHECK(log->abandons().empty());
    }
    CHECK(log->abandons() == std::vector<Hash128>{entry.key_hash});
  }
  SECTION("abandoned explicitly, once") {
    auto looked_up = storage.get_or_reserve(entry.key_hash, entry.canonical_key);
    auto& reservation = std::get<Reservation>(looked_up);
    reservation.abandon();
    reservation.abandon();
    CHECK(log->abandons() == std::vector<Hash128>{entry.key_hash});
  }
  CHECK(log->publishes().empty());
  CHECK_FALSE(fs::exists(lease_file(dir.path(), entry.key_hash)));  // the lease is released
  CHECK(storage.local().get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
  // The next miss takes the lease at once.
  auto next = storage.get_or_reserve(entry.key_hash, entry.canonical_key);
  REQUIRE(std::holds_alternative<Reservation>(next));
  CHECK(std::get<Reservation>(next).lease_owned());
}

TEST_CASE("storage: a miss waits for another process's compile, then reads it", "[cache]") {
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  auto log = std::make_shared<TierLog>();
  storage.add_tier(TierKind::pack, std::make_unique<FakeTier>(log));
  const Entry entry = make_entry("elsewhere", 2000);

  // Another compiler (a second store on the same root) holds the lease and publishes after a while.
  kiln::cache::Store other(store_config(dir.path()));
  auto lease = other.acquire_lease(entry.key_hash, 1s);
  REQUIRE(lease.owned());
  std::thread owner([&] {
    std::this_thread::sleep_for(150ms);
    (void)other.put(entry);
    lease.release();
  });
  auto looked_up = storage.get_or_reserve(entry.key_hash, entry.canonical_key);
  owner.join();
  const auto* found = std::get_if<Found>(&looked_up);
  REQUIRE(found != nullptr);
  CHECK(found->origin == HitOrigin::local);
  CHECK_FALSE(found->stored);
  CHECK(found->entry->payload == entry.payload);
  CHECK(log->abandons() == std::vector<Hash128>{entry.key_hash});  // nothing will be compiled here
  CHECK(log->publishes().empty());
  // Waiting for another process's compile and then reading its entry is a hit, not also a miss (the
  // hit ratio counted such a request twice).
  CHECK(storage.counters().misses == 0);
  CHECK(storage.counters().disk_hits == 1);
}

TEST_CASE("storage: refresh skips every lookup and reserves", "[cache]") {
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  auto log = std::make_shared<TierLog>();
  storage.add_tier(TierKind::pack, std::make_unique<FakeTier>(log));
  const Entry entry = make_entry("refused", 2000);
  REQUIRE(storage.local().put(entry));

  storage.discard(entry.key_hash);  // the driver refused what was read
  CHECK_FALSE(fs::exists(storage.local().entry_path(entry.key_hash)));
  CHECK(storage.counters().corrupt_removed == 1);
  auto looked_up = storage.get_or_reserve(entry.key_hash, entry.canonical_key, /*refresh=*/true);
  auto* reservation = std::get_if<Reservation>(&looked_up);
  REQUIRE(reservation != nullptr);
  CHECK(log->get_count() == 0);
  CHECK(reservation->put(entry));
  CHECK(log->publishes() == std::vector<Hash128>{entry.key_hash});
}

TEST_CASE("storage: a read-only local store serves hits and writes nothing", "[cache]") {
  TempDir dir;
  const Entry cached = make_entry("cached", 1000);
  const Entry fresh = make_entry("fresh", 1000);
  {
    kiln::cache::Store writer(store_config(dir.path()));
    REQUIRE(writer.put(cached));
  }
  StorageConfig config = storage_config(dir.path());
  config.local.read_only = true;
  Storage storage(config);
  REQUIRE(storage.local().mode() == StoreMode::read_only);
  auto log = std::make_shared<TierLog>();
  storage.add_tier(TierKind::pack, std::make_unique<FakeTier>(log));

  CHECK(storage.get_local(cached.key_hash, cached.canonical_key) != nullptr);

  auto looked_up = storage.get_or_reserve(fresh.key_hash, fresh.canonical_key);
  auto* reservation = std::get_if<Reservation>(&looked_up);
  REQUIRE(reservation != nullptr);
  CHECK_FALSE(reservation->lease_owned());  // a read-only store takes no lease: compile without one
  CHECK_FALSE(reservation->put(fresh));
  CHECK(log->publishes() == std::vector<Hash128>{fresh.key_hash});  // the tiers still hear of it
  CHECK_FALSE(fs::exists(storage.local().entry_path(fresh.key_hash)));
  CHECK_FALSE(fs::exists(lease_file(dir.path(), fresh.key_hash)));
  CHECK(storage.counters().bytes_written == 0);

  // A tier hit cannot be copied: served all the same.
  log->serves = fresh;
  auto from_tier = storage.get_or_reserve(fresh.key_hash, fresh.canonical_key);
  const auto* found = std::get_if<Found>(&from_tier);
  REQUIRE(found != nullptr);
  CHECK(found->origin == HitOrigin::pack);
  CHECK_FALSE(found->stored);
}

TEST_CASE("storage: a tier that cannot be opened is left out with one warning", "[cache]") {
  TempDir dir;
  const Entry entry = make_entry("survivor", 1000);
  const fs::path good = dir.path() / "good.kpack";
  const fs::path bad = dir.path() / "bad.kpack";
  kiln::cache::write_pack(good, {entry});
  write_bytes(bad, std::as_bytes(std::span(std::string_view("not a pack at all, just some text"))));
  StorageConfig config = storage_config(dir.path() / "cache");
  config.packs = {(dir.path() / "missing.kpack").string(), bad.string(), good.string()};

  SECTION("packs") {
    StderrCapture capture;
    Storage storage(config);
    CHECK(storage.tier_count() == 1);
    CHECK(capture.warnings() == 2);
    CHECK(count_occurrences(capture.text(), "continuing without this pack") == 2);
    auto looked_up = storage.get_or_reserve(entry.key_hash, entry.canonical_key);
    const auto* found = std::get_if<Found>(&looked_up);
    REQUIRE(found != nullptr);
    CHECK(found->origin == HitOrigin::pack);
  }
  SECTION("the remote") {
    config.packs.clear();
    config.remote_url = "http://user:secret@example.invalid/";
    StderrCapture capture;
    Storage storage(config);
    CHECK(storage.tier_count() == 0);
    CHECK(storage.remote() == nullptr);
    CHECK(capture.warnings() == 1);
    CHECK(capture.text().find("continuing without it") != std::string::npos);
    CHECK(capture.text().find("secret") == std::string::npos);  // never the password
  }
  SECTION("open_tiers reports each in lookup order") {
    config.remote_url = "http://user:secret@example.invalid/";
    StderrCapture capture;
    const auto opened = kiln::cache::open_tiers(config);
    CHECK(capture.warnings() == 0);  // reporting is the caller's
    REQUIRE(opened.size() == 4);
    CHECK(opened[0].kind == TierKind::pack);
    CHECK(opened[0].location == config.packs[0]);
    CHECK_FALSE(opened[0].tier);
    CHECK_FALSE(opened[0].error.empty());
    CHECK_FALSE(opened[1].tier);
    CHECK(opened[2].tier);
    CHECK(opened[2].error.empty());
    CHECK(opened[3].kind == TierKind::remote);
    CHECK_FALSE(opened[3].tier);
    CHECK(opened[3].location.find("secret") == std::string::npos);
    CHECK(opened[3].error.find("secret") == std::string::npos);
  }
}

TEST_CASE("storage: a manifest is asked of the remotes in order, installed untrusted and back-filled", "[cache]") {
  TempDir dir;
  Storage storage(storage_config(dir.path() / "node"));
  auto first = std::make_unique<FakeRemote>(std::make_shared<TierLog>());
  auto second = std::make_unique<FakeRemote>(std::make_shared<TierLog>());
  FakeRemote& a = *first;
  FakeRemote& b = *second;
  storage.add_tier(TierKind::remote, std::move(first));
  storage.add_tier(TierKind::remote, std::move(second));
  // The node's manifests (the include home's), which the storage's remotes carry as opaque records.
  kiln::cache::DependencyManifests manifests(kiln::cache::manifest_config_of(storage.local()));

  kiln::cache::CanonicalKey request;
  request.add("format", "storage-test");
  // Recorded on another machine: a header with a trusted stat.
  kiln::cache::DependencyManifests elsewhere(dir.path() / "elsewhere", false);
  kiln::cache::DependencySet set;
  set.headers.push_back({"/nowhere/h.h", kiln::cache::FileStat{.size = 5, .mtime_ns = 1, .ctime_ns = 1, .inode = 7,
                                                                .device = 1},
                         true, kiln::cache::hash128("x")});
  const std::vector<std::byte> bytes = elsewhere.record(request.hash(), request.bytes(), set, kiln::cache::hash128("r"));
  REQUIRE_FALSE(bytes.empty());
  // The request's include folder: the header lies in it (nothing is there on this machine).
  const kiln::cache::ManifestScope scope{{"/nowhere"}, {}};

  CHECK_FALSE(manifests.fetch(storage, request.hash(), request.bytes(), scope));  // no remote has it
  b.manifests[request.hash()] = bytes;
  REQUIRE(manifests.fetch(storage, request.hash(), request.bytes(), scope));
  CHECK(a.manifests.at(request.hash()) == bytes);  // back-filled into the remote asked first
  const auto installed = manifests.bytes(request.hash());
  REQUIRE(installed);
  auto parsed = kiln::cache::parse_manifest(*installed);
  REQUIRE(std::holds_alternative<kiln::cache::Manifest>(parsed));
  const kiln::cache::HeaderRecord& header = std::get<kiln::cache::Manifest>(parsed).files.at(0);
  CHECK_FALSE(header.trusted_stat);
  CHECK(header.stat == kiln::cache::FileStat{});
  // Installed only where none is.
  CHECK_FALSE(manifests.fetch(storage, request.hash(), request.bytes(), scope));

  // Offered to every remote; nothing for an empty record (nothing was written).
  a.manifests.clear();
  b.manifests.clear();
  storage.publish_manifest(request.hash(), bytes);
  CHECK(a.manifests.size() == 1);
  CHECK(b.manifests.size() == 1);
  storage.publish_manifest(kiln::cache::hash128("other"), {});
  CHECK(a.manifests.size() == 1);
}
