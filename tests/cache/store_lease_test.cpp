// The store's cross-process compile lease: owned and released, broken when its owner died or it went
// stale, respected while a live owner refreshes it. Part of cache_store_test. No compiler, no GPU.
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "cache_test_support.hpp"
#include "test_support.hpp"

using namespace kiln_test;
using namespace std::chrono_literals;

TEST_CASE("store: compile leases", "[cache]") {
  TempDir dir;
  Store store(store_config(dir.path()));
  const Entry entry = make_entry("leased", 1000);
  const fs::path lease_path = dir.path() / "lock" / (entry.key_hash.hex() + ".lease");

  SECTION("owned, then released; a second waiter in a live owner's shadow times out") {
    auto lease = store.acquire_lease(entry.key_hash, 1s);
    REQUIRE(lease.owned());
    REQUIRE(fs::exists(lease_path));
    std::ifstream in(lease_path);
    long pid = 0;
    std::string host;
    long long stamp = 0;
    in >> pid >> host >> stamp;
    CHECK(pid == ::getpid());
    CHECK_FALSE(host.empty());
    CHECK(stamp > 1700000000);
    const auto other = store.acquire_lease(entry.key_hash, 50ms);  // the owner (this process) is alive
    CHECK_FALSE(other.owned());
    CHECK(fs::exists(lease_path));
    lease.release();
    CHECK_FALSE(fs::exists(lease_path));
  }

  SECTION("a lease whose owner died is broken") {
    const ChildResult child = run_in_child([&]() -> std::string {
      Store child_store(store_config(dir.path()));
      auto lease = child_store.acquire_lease(entry.key_hash, 1s);
      if (!lease.owned()) return "child did not get the lease";
      std::fflush(stderr);
      ::_exit(0);  // dies holding it: no destructor runs
    });
    REQUIRE(child.failure.empty());
    REQUIRE(fs::exists(lease_path));
    const auto start = std::chrono::steady_clock::now();
    auto lease = store.acquire_lease(entry.key_hash, 20s);
    const auto waited = std::chrono::steady_clock::now() - start;
    CHECK(lease.owned());
    UNSCOPED_INFO("broke a dead owner's lease after "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count() << " ms");
  }

  SECTION("a live owner in another process is respected until it finishes") {
    int ready[2];
    int go[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(go) == 0);
    const pid_t owner = ::fork();
    if (owner == 0) {
      Store child_store(store_config(dir.path()));
      auto lease = child_store.acquire_lease(entry.key_hash, 1s);
      (void)!::write(ready[1], lease.owned() ? "y" : "n", 1);
      char c = 0;
      (void)!::read(go[0], &c, 1);
      (void)child_store.put(entry);  // the compile finishes and is published
      lease.release();
      ::_exit(0);
    }
    REQUIRE(owner > 0);
    char answer = 0;
    REQUIRE(::read(ready[0], &answer, 1) == 1);
    REQUIRE(answer == 'y');
    const auto timed_out = store.acquire_lease(entry.key_hash, 200ms);
    CHECK_FALSE(timed_out.owned());
    CHECK(fs::exists(lease_path));
    std::thread finish([&] {
      std::this_thread::sleep_for(100ms);
      (void)!::write(go[1], "g", 1);
    });
    const auto after = store.acquire_lease(entry.key_hash, 20s);
    finish.join();
    CHECK_FALSE(after.owned());  // the owner finished: read the store
    CHECK(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::hit);
    int status = 0;
    ::waitpid(owner, &status, 0);
  }

  SECTION("a stale lease from another host is broken by age; a fresh one is respected") {
    fs::create_directories(lease_path.parent_path());
    write_bytes(lease_path, std::as_bytes(std::span(std::string_view("1 other-host 1700000000 00\n"))));
    const auto respected = store.acquire_lease(entry.key_hash, 100ms);
    CHECK_FALSE(respected.owned());
    backdate(lease_path, Store::kLeaseStaleAge + 30s);
    const auto broken = store.acquire_lease(entry.key_hash, 2s);
    CHECK(broken.owned());
  }

  // Third probe: a lease left by a live process that is not compiling stalled a waiter for 60 s, while
  // the warning promised "up to 119 s more". A holder now refreshes its lease while it works, so one
  // that stopped refreshing is broken once it is kLeaseStaleAge old.
  SECTION("a live holder that stopped refreshing its lease is waited for until it is stale, not the whole wait") {
    const kiln::test::LiveChild holder;
    fs::create_directories(lease_path.parent_path());
    const std::string text = holder.lease_text();
    write_bytes(lease_path, std::as_bytes(std::span(std::string_view(text))));
    backdate(lease_path, Store::kLeaseStaleAge - 2s);
    const auto started = std::chrono::steady_clock::now();
    const auto lease = store.acquire_lease(entry.key_hash, 40s);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    CHECK(lease.owned());
    CHECK(waited < 10.0);
  }

  SECTION("a lease is refreshed while its holder holds it") {
    auto lease = store.acquire_lease(entry.key_hash, 1s);
    REQUIRE(lease.owned());
    backdate(lease_path, 10s);
    std::this_thread::sleep_for(Store::kLeaseRefresh + 1500ms);
    const auto age = fs::file_time_type::clock::now() - fs::last_write_time(lease_path);
    CHECK(age < std::chrono::duration_cast<fs::file_time_type::duration>(Store::kLeaseRefresh + 1s));
    lease.release();
    CHECK_FALSE(fs::exists(lease_path));
  }

  SECTION("release leaves a lease that is no longer ours") {
    auto lease = store.acquire_lease(entry.key_hash, 1s);
    REQUIRE(lease.owned());
    write_bytes(lease_path, std::as_bytes(std::span(std::string_view("1 other-host 1700000000 01\n"))));
    lease.release();
    CHECK(fs::exists(lease_path));
  }

  SECTION("an existing entry means nothing to compile") {
    REQUIRE(store.put(entry));
    const auto lease = store.acquire_lease(entry.key_hash, 1s);
    CHECK_FALSE(lease.owned());
    CHECK_FALSE(fs::exists(lease_path));
  }
}
