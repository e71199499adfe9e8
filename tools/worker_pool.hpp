#pragma once
// Running kiln prewarm's jobs. At -j above 1 every job that has to compile runs in a worker process
// (`kiln prewarm --worker`, this binary re-executed) that takes one job at a time over a pipe and
// answers one JSON line each: HIPRTC serializes inside a process and NVRTC instances contend inside
// one, so both vendors scale across processes, not threads (bench/RESULTS.md, sections 11 and 7). Jobs
// go out from
// one queue, in the plan's order, to whichever worker is idle. A worker that dies (HIPRTC can abort
// the process; someone can kill it) fails only the job it held; a fresh worker takes the rest. The
// thread mode runs jobs on this process's engine (Engine::prewarm is thread-safe).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/engine.hpp"
#include "prewarm_plan.hpp"

namespace kiln::cli::prewarm {

enum class Status { pending, compiled, cached, failed };

[[nodiscard]] std::string_view to_string(Status status);

struct JobResult {
  Status status = Status::pending;
  std::string key;
  double seconds = 0;       ///< the compile's own time (or the lookup's)
  double wait_seconds = 0;  ///< before it: waiting for another process's compile of the key
  std::uint64_t bytes = 0;
  std::string error;
  std::string log;  ///< the compiler's log for a failed compile
  /// Failed on the request's own mistake (a ConfigError: a kernel the binary does not define, ...):
  /// the command then exits 2 (bad input), not 1.
  bool bad_input = false;
};

/// Runs one job on this process's engine. Never throws.
[[nodiscard]] JobResult execute(Engine& engine, const Job& job);

/// Called once per finished job, with its index in `jobs`; from several threads at once in the
/// thread mode.
using JobDone = std::function<void(std::size_t index, const JobResult& result)>;

/// Runs jobs[i] for every i in `indices` on up to `threads` threads of this process; stores each
/// result in results[i].
void run_on_threads(Engine& engine, const std::vector<Job>& jobs, const std::vector<std::size_t>& indices,
                    unsigned threads, std::vector<JobResult>& results, const JobDone& done);

/// The jobs run_in_workers handed to no worker because, with none running, the system refused to start one
/// (a process limit refused the fork, or no pipe could be made), and why.
struct Unstarted {
  std::vector<std::size_t> indices;
  std::string why;
};

/// Runs jobs[i] for every i in `indices` in up to `count` worker processes, in the order given;
/// stores each result in results[i]. Returns when every worker has written all it did to disk, with the
/// jobs left when no worker was running and none could be started (the caller runs them itself).
[[nodiscard]] Unstarted run_in_workers(const std::vector<Job>& jobs, const std::vector<std::size_t>& indices,
                                       unsigned count, std::vector<JobResult>& results, const JobDone& done);

/// `kiln prewarm --worker`: one job per stdin line ("<index>\t<plain kernels>\t<request log line>"), one
/// JSON answer per stdout line, until EOF; then ends the process. Returns (kExitError) only when the
/// pipes cannot be set up or a line is not a job.
[[nodiscard]] int run_worker();

/// Ends this process without tearing anything down, after closing the storage's remote tiers
/// (Storage::close_tiers: queued publishes written, leases released, tier counters recorded, bounded in
/// time) and persisting the engine's lifetime counters (what the destructors would do), flushing output
/// and closing `close_file` (a worker's answer pipe: the parent's signal that all is done). Unloading a
/// compiler library that has compiled is slow (bench/RESULTS.md, section 11), and it would be paid by
/// every worker and by the parent after all the work is done.
[[noreturn]] void exit_without_teardown(Engine& engine, int code, std::FILE* close_file = nullptr);

}  // namespace kiln::cli::prewarm
