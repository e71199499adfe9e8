#pragma once
// What kiln prewarm shows: progress on stderr while the jobs run (a bar on a terminal, a line per
// finished job otherwise), then the report on stdout (text, or JSON with --json).
#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "prewarm_plan.hpp"
#include "worker_pool.hpp"

namespace kiln::cli::prewarm {

class Progress {
 public:
  /// `jobs` is borrowed. `quiet`: show nothing.
  Progress(const std::vector<Job>& jobs, bool quiet);
  /// Job `index` finished. Thread-safe.
  void done(std::size_t index, const JobResult& result);
  /// All jobs finished: ends the terminal's progress line.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  void draw_locked();

  const std::vector<Job>& m_jobs;
  bool m_quiet;
  bool m_tty;
  Clock::time_point m_start;
  std::mutex m_mutex;
  std::size_t m_done = 0;
  std::size_t m_counts[4] = {};
};

/// What --remote wrote to the remote tier.
struct RemoteFill {
  std::string url;  ///< without the password
  std::size_t written = 0;
  std::size_t failed = 0;
  std::size_t manifests = 0;  ///< dependency manifests written (requests with include folders)
  std::set<std::string> reasons;
};

/// Everything the report shows.
struct Outcome {
  const std::vector<Job>& jobs;
  const std::vector<JobResult>& results;  ///< one per job
  const std::optional<RemoteFill>& remote;
  unsigned parallel = 0;  ///< -j
  double wall_seconds = 0;
  bool verbose = false;  ///< include the compiler logs of failed jobs
};

/// Prints every job and a summary as one JSON document.
void print_json_report(const Outcome& outcome);
/// Prints the failures grouped by reason, a summary line and what --remote did.
void print_text_report(const Outcome& outcome);
/// True when no job failed and every remote write succeeded: the command's exit status.
[[nodiscard]] bool all_succeeded(const Outcome& outcome);
/// True when a job failed on its own bad input (JobResult::bad_input): the command then exits 2.
[[nodiscard]] bool any_bad_input(const Outcome& outcome);

}  // namespace kiln::cli::prewarm
