#pragma once
// Spreading independent work over threads: reading the store's shard directories, removing entry
// files, prewarm jobs in one process.
#include <cstddef>
#include <functional>

namespace kiln::cli {

/// Calls `fn(index)` for index in [0, count) on up to `threads` threads (0 = all cores). An exception from
/// `fn` stops the others at their next batch and is rethrown here once all have finished.
void parallel_for(std::size_t count, unsigned threads, const std::function<void(std::size_t)>& fn);
[[nodiscard]] unsigned default_threads();
/// Threads for reading many small files: twice the cores (at least 4), to hide I/O latency.
[[nodiscard]] unsigned io_threads();

}  // namespace kiln::cli
