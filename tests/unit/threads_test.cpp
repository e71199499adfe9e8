// share_work (base/internal/kiln/base/threads.hpp): the one way libkiln and the CLI share a call's work among
// threads. Every item done once, the caller's thread used, an exception carried back after every thread joined,
// and the work done on the caller's thread alone when the system starts no other (a thread limit).
#include <grp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "kiln/base/threads.hpp"

using kiln::detail::share_work;

TEST_CASE("share_work runs every item once, on the caller and its helpers") {
  constexpr std::size_t kItems = 10'000;
  std::vector<std::atomic<int>> done(kItems);
  std::atomic<std::size_t> next{0};
  std::vector<std::thread::id> ids(4);
  const unsigned ran = share_work(4, [&](unsigned t) {
    ids[t] = std::this_thread::get_id();
    for (std::size_t k = next++; k < kItems; k = next++) done[k]++;
  });
  CHECK(ran == 4);
  for (std::size_t k = 0; k < kItems; ++k) REQUIRE(done[k] == 1);
  CHECK(ids[0] == std::this_thread::get_id());  // t = 0 is the caller
  for (unsigned t = 1; t < 4; ++t) CHECK(ids[t] != ids[0]);
}

TEST_CASE("share_work with one thread runs on the caller only") {
  std::vector<unsigned> seen;
  CHECK(share_work(1, [&](unsigned t) { seen.push_back(t); }) == 1);
  CHECK(share_work(0, [&](unsigned t) { seen.push_back(t); }) == 1);
  CHECK(seen == std::vector<unsigned>{0, 0});
}

TEST_CASE("share_work rethrows the lowest thread's exception after joining all") {
  std::atomic<unsigned> finished{0};
  const auto fail_all = [&](unsigned t) {
    finished++;
    throw std::runtime_error("thread " + std::to_string(t));
  };
  CHECK_THROWS_WITH(share_work(3, fail_all), "thread 0");
  CHECK(finished == 3);  // every thread ran to its end before the call returned

  // One failing item stops the others at their next item (the counter moved past the end).
  constexpr std::size_t kItems = 1'000'000;
  std::atomic<std::size_t> next{0}, processed{0};
  const auto fail_at_10 = [&](unsigned) {
    try {
      for (std::size_t k = next++; k < kItems; k = next++) {
        if (k == 10) throw std::runtime_error("item 10");
        processed++;
      }
    } catch (...) {
      next = kItems;
      throw;
    }
  };
  CHECK_THROWS_WITH(share_work(4, fail_at_10), "item 10");
  CHECK(processed < kItems / 2);  // without the early stop: kItems - 1
}

TEST_CASE("share_items hands out every item once, in batches, and stops at a failing one") {
  constexpr std::size_t kItems = 1'003;  // not a multiple of the batch
  std::vector<std::atomic<int>> done(kItems);
  std::vector<std::atomic<int>> by_thread(3);
  CHECK(kiln::detail::share_items(kItems, 3, 64, [&](std::size_t k, unsigned t) {
          done[k]++;
          by_thread[t]++;
        }) == 3);
  for (std::size_t k = 0; k < kItems; ++k) REQUIRE(done[k] == 1);
  CHECK(by_thread[0] + by_thread[1] + by_thread[2] == static_cast<int>(kItems));

  std::size_t calls = 0;
  kiln::detail::share_items(0, 4, 8, [&](std::size_t, unsigned) { ++calls; });  // nothing to do
  kiln::detail::share_items(5, 1, 0, [&](std::size_t, unsigned) { ++calls; });   // batch 0 taken as 1
  CHECK(calls == 5);

  constexpr std::size_t kMany = 1'000'000;
  std::atomic<std::size_t> processed{0};
  CHECK_THROWS_WITH(kiln::detail::share_items(kMany, 4, 16,
                                              [&](std::size_t k, unsigned) {
                                                if (k == 10) throw std::runtime_error("item 10");
                                                processed++;
                                              }),
                    "item 10");
  CHECK(processed < kMany / 2);  // without the early stop: kMany - 1
}

namespace {

/// What the child of "share_items when the system starts no thread" exits with.
enum RefusedThreads : int { kRan = 0, kWrong = 1, kNoNobody = 2, kNotRefused = 3 };

/// In a child process: becomes `nobody` when root (a root process is not held by RLIMIT_NPROC), allows
/// the user one process, checks that a thread then cannot start, and runs share_items over 4 threads.
[[noreturn]] void refused_threads_child() {
  if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)) {
    ::_exit(kNoNobody);
  }
  const rlimit one{1, 1};
  if (::setrlimit(RLIMIT_NPROC, &one) != 0) ::_exit(kNotRefused);
  try {
    std::thread probe([] {});
    probe.join();
    ::_exit(kNotRefused);  // the system started it all the same
  } catch (const std::system_error&) {
  }
  constexpr std::size_t kItems = 1'000;
  std::vector<int> done(kItems);  // one thread only: plain ints
  unsigned ran = 0;
  try {
    ran = kiln::detail::share_items(kItems, 4, 7, [&](std::size_t k, unsigned t) { done[k] += t == 0 ? 1 : 100; });
  } catch (...) {
    ::_exit(kWrong);
  }
  for (const int d : done) {
    if (d != 1) ::_exit(kWrong);  // every item once, on the caller
  }
  ::_exit(ran == 1 ? kRan : kWrong);
}

}  // namespace

TEST_CASE("share_items when the system starts no thread: the caller does every item") {
  // What a thread limit (RLIMIT_NPROC, a container's pids limit) does to the resolver and the CLI: std::thread
  // throws std::system_error, and the work runs on the threads there are, here the caller's alone.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) refused_threads_child();
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  switch (WEXITSTATUS(status)) {
    case kNoNobody:
      WARN("left out: could not become nobody to be held by a thread limit");
      return;
    case kNotRefused:
      WARN("left out: a thread limit of one process did not stop a thread from starting here");
      return;
    default:
      CHECK(WEXITSTATUS(status) == kRan);
  }
}
