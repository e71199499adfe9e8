#pragma once
// Work shared among a few threads for one call: the caller's own and helpers started for it, all joined
// before the call returns. The include resolver's reads and rewrite, the dependency-manifest check's stats
// and the CLI's loops over shards, files and jobs each start their threads this one way; share_items hands
// out the items of a loop from one counter.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

namespace kiln::detail {

/// Runs `work(t)` for t = 0 .. threads - 1: t = 0 on the calling thread, the others on threads started
/// here, in order. When the system starts fewer (a thread limit), those that run take the rest of the work,
/// so `work` must share its items through a counter, not split them by t; t indexes per-thread storage
/// only. Returns once every started thread has finished: how many ran (at least 1). An exception that
/// leaves `work` is caught on its thread; after all have been joined, the one of the lowest t is rethrown.
/// A failing `work` should make the others stop early (share_items does: it moves its counter past the end).
template <class Work>
unsigned share_work(unsigned threads, Work&& work) {
  if (threads <= 1) {
    work(0U);
    return 1;
  }
  std::vector<std::exception_ptr> errors(threads);
  const auto run = [&](unsigned t) {
    try {
      work(t);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  std::vector<std::thread> helpers;
  try {
    helpers.reserve(threads - 1);
    for (unsigned t = 1; t < threads; ++t) helpers.emplace_back(run, t);
  } catch (const std::system_error&) {
    // Fewer threads: the ones started and this one share the work all the same.
  } catch (const std::bad_alloc&) {
  }
  run(0);
  for (std::thread& helper : helpers) helper.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  return static_cast<unsigned>(helpers.size()) + 1;
}

/// Calls `item(k, t)` for every k below `count` on `threads` threads (share_work; t is the calling thread's
/// index, for per-thread storage), which take the items from one counter, `batch` at a time (at least 1).
/// An exception from `item` stops the others at their next batch and is rethrown once all have joined.
/// Returns how many threads ran.
template <class Item>
unsigned share_items(std::size_t count, unsigned threads, std::size_t batch, Item&& item) {
  batch = std::max<std::size_t>(batch, 1);
  std::atomic<std::size_t> next{0};
  return share_work(threads, [&](unsigned t) {
    for (;;) {
      const std::size_t begin = next.fetch_add(batch);
      if (begin >= count) return;
      const std::size_t end = std::min(count, begin + batch);
      try {
        for (std::size_t k = begin; k < end; ++k) item(k, t);
      } catch (...) {
        next = count;  // the others stop at their next batch
        throw;
      }
    }
  });
}

}  // namespace kiln::detail
