#include "parallel.hpp"

#include <algorithm>
#include <atomic>
#include <thread>

#include "kiln/base/threads.hpp"

namespace kiln::cli {

unsigned default_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return std::clamp(cores, 1U, 32U);
}

unsigned io_threads() { return std::clamp(2 * std::thread::hardware_concurrency(), 4U, 32U); }

void parallel_for(std::size_t count, unsigned threads, const std::function<void(std::size_t)>& fn) {
  if (threads == 0) threads = default_threads();
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, count));
  if (threads <= 1) {
    for (std::size_t i = 0; i < count; ++i) fn(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  const std::size_t batch = std::clamp<std::size_t>(count / (threads * 16), 1, 64);
  kiln::detail::share_work(threads, [&](unsigned) {
    for (;;) {
      const std::size_t begin = next.fetch_add(batch);
      if (begin >= count) return;
      const std::size_t end = std::min(count, begin + batch);
      try {
        for (std::size_t i = begin; i < end; ++i) fn(i);
      } catch (...) {
        next = count;  // the others stop at their next batch; the caller gets the exception
        throw;
      }
    }
  });
}

}  // namespace kiln::cli
