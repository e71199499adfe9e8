#include "parallel.hpp"

#include <algorithm>
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
  const std::size_t batch = threads <= 1 ? count : std::clamp<std::size_t>(count / (threads * 16), 1, 64);
  kiln::detail::share_items(count, threads, batch, [&](std::size_t i, unsigned) { fn(i); });
}

}  // namespace kiln::cli
