// What kiln prewarm shows: progress while it runs and the report at the end (prewarm_report.hpp).
#include "prewarm_report.hpp"

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <map>

#include <fmt/format.h>

#include "formatting.hpp"
#include "json_output.hpp"

namespace kiln::cli::prewarm {

namespace {

/// A failure reason for a line of text output: compile errors carry the whole log, which --verbose
/// (or --json) prints in full.
std::string short_reason(const std::string& reason) {
  // The compiler's summary comes first and kiln's explanation after it (a missing header: the folders searched,
  // that the working directory is not): room for both, cut only past that.
  constexpr std::size_t kMax = 800;
  return reason.size() <= kMax ? reason : reason.substr(0, kMax) + "...";
}

/// The summary's numbers.
struct Totals {
  std::size_t compiled = 0;
  std::size_t cached = 0;
  std::size_t failed = 0;
  double compile_seconds = 0;  ///< the compiles' own time, summed over jobs (stored or not)
  std::set<std::string> targets;
};

Totals totals(const Outcome& outcome) {
  Totals totals;
  for (const JobResult& result : outcome.results) {
    if (result.status == Status::compiled) {
      ++totals.compiled;
      totals.compile_seconds += result.seconds;
    }
    if (result.status == Status::cached) ++totals.cached;
    if (result.status == Status::failed) {
      ++totals.failed;
      // A request that compiled but could not be stored spent its compile all the same (a failed lookup
      // or compile reports no time).
      totals.compile_seconds += result.seconds;
    }
  }
  for (const Job& job : outcome.jobs) {
    if (!job.request.target.empty()) totals.targets.insert(job.request.target);  // none: a line that is no request
  }
  return totals;
}

}  // namespace

// ---- progress ---------------------------------------------------------------------------------------

Progress::Progress(const std::vector<Job>& jobs, bool quiet)
    : m_jobs(jobs), m_quiet(quiet), m_tty(::isatty(STDERR_FILENO) != 0), m_start(Clock::now()) {
  draw_locked();
}

void Progress::done(std::size_t index, const JobResult& result) {
  const std::lock_guard lock(m_mutex);
  ++m_done;
  ++m_counts[static_cast<int>(result.status)];
  if (m_quiet) return;
  if (m_tty) {
    draw_locked();
    return;
  }
  // A failure's reason is printed once, by the report (grouped with the others that share it).
  const std::string what = result.status == Status::failed
                               ? std::string("FAILED (the reason follows in the report)")
                               : fmt::format("{} ({}{})", to_string(result.status), format_seconds(result.seconds),
                                             result.wait_seconds >= 0.5
                                                 ? fmt::format(", after waiting {} for another process's compile",
                                                               format_seconds(result.wait_seconds))
                                                 : std::string());
  std::cerr << fmt::format("[{}/{}] {} {}\n", m_done, m_jobs.size(), m_jobs[index].label(), what);
}

void Progress::finish() {
  const std::lock_guard lock(m_mutex);
  if (!m_quiet && m_tty && !m_jobs.empty()) std::cerr << '\n';
}

void Progress::draw_locked() {
  if (m_quiet || !m_tty || m_jobs.empty()) return;
  constexpr int kWidth = 30;
  const auto filled = static_cast<int>(kWidth * m_done / m_jobs.size());
  const double elapsed = std::chrono::duration<double>(Clock::now() - m_start).count();
  std::cerr << fmt::format("\r\033[K[{}{}] {}/{}  compiled {}  cached {}  failed {}  {}", std::string(filled, '#'),
                           std::string(kWidth - filled, '.'), m_done, m_jobs.size(),
                           m_counts[static_cast<int>(Status::compiled)], m_counts[static_cast<int>(Status::cached)],
                           m_counts[static_cast<int>(Status::failed)], format_seconds(elapsed))
            << std::flush;
}

// ---- the report -------------------------------------------------------------------------------------

void print_json_report(const Outcome& outcome) {
  const Totals sum = totals(outcome);
  json requests = json::array();
  for (std::size_t i = 0; i < outcome.jobs.size(); ++i) {
    const Job& job = outcome.jobs[i];
    const JobResult& result = outcome.results[i];
    json item = {{"source", job.request.source_name},
                 {"builtin", job.request.builtin},
                 {"kernels", job.kernels},
                 {"names", job.request.name_expressions},
                 {"options", job.request.options},
                 {"target", job.request.target},
                 {"status", std::string(to_string(result.status))},
                 {"key", result.key},
                 {"seconds", result.seconds},
                 {"wait_seconds", result.wait_seconds},
                 {"bytes", result.bytes}};
    if (result.status == Status::failed) {
      item["error"] = result.error;
      if (outcome.verbose) item["log"] = result.log;
    }
    requests.push_back(std::move(item));
  }
  const std::optional<RemoteFill>& remote = outcome.remote;
  print_json({{"requests", std::move(requests)},
              {"summary",
               {{"requests", outcome.jobs.size()},
                {"compiled", sum.compiled},
                {"cached", sum.cached},
                {"failed", sum.failed},
                {"targets", sum.targets},
                {"jobs", outcome.parallel},
                {"wall_seconds", outcome.wall_seconds},
                {"compile_seconds", sum.compile_seconds},
                {"remote_written", remote ? remote->written : 0},
                {"remote_failed", remote ? remote->failed : 0},
                {"remote_manifests", remote ? remote->manifests : 0}}}});
}

void print_text_report(const Outcome& outcome) {
  const Totals sum = totals(outcome);
  const std::vector<Job>& jobs = outcome.jobs;
  const std::vector<JobResult>& results = outcome.results;
  // Failures, grouped by reason (an unsupported target fails every request for it the same way).
  std::map<std::string, std::vector<std::size_t>> by_reason;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (results[i].status == Status::failed) by_reason[results[i].error].push_back(i);
  }
  for (const auto& [reason, indices] : by_reason) {
    if (indices.size() == 1) {
      std::cout << fmt::format("failed: {}: {}\n", jobs[indices[0]].label(), short_reason(reason));
    } else {
      std::cout << fmt::format("failed ({} requests): {}\n", indices.size(), short_reason(reason));
      for (std::size_t k = 0; k < indices.size() && k < 5; ++k) std::cout << "  " << jobs[indices[k]].label() << '\n';
      if (indices.size() > 5) std::cout << fmt::format("  ... and {} more\n", indices.size() - 5);
    }
    if (outcome.verbose) {
      for (const std::size_t i : indices) {
        if (!results[i].log.empty()) std::cout << fmt::format("--- log of {}:\n{}\n", jobs[i].label(), results[i].log);
      }
    }
  }
  std::cout << fmt::format(
      "prewarm: {} for {}: {} compiled, {} already cached, {} failed; {} wall, {} compiling (-j {})\n",
      counted(jobs.size(), "request", "requests"), fmt::join(sum.targets, ", "), sum.compiled, sum.cached, sum.failed,
      format_seconds(outcome.wall_seconds), format_seconds(sum.compile_seconds), outcome.parallel);
  const bool logs = std::any_of(results.begin(), results.end(),
                                [](const JobResult& result) { return result.status == Status::failed && !result.log.empty(); });
  if (logs && !outcome.verbose) std::cout << "(--verbose prints the compiler logs)\n";
  if (const std::optional<RemoteFill>& remote = outcome.remote) {
    std::cout << fmt::format("remote: {}{} written to {}{}\n", counted(remote->written, "entry", "entries"),
                             remote->manifests
                                 ? " and " + counted(remote->manifests, "dependency manifest", "dependency manifests")
                                 : std::string(),
                             remote->url, remote->failed ? fmt::format(", {} failed", remote->failed) : std::string());
    for (const std::string& why : remote->reasons) std::cout << "  remote failure: " << why << '\n';
  }
}

bool all_succeeded(const Outcome& outcome) {
  const bool jobs_ok = std::none_of(outcome.results.begin(), outcome.results.end(),
                                    [](const JobResult& result) { return result.status == Status::failed; });
  return jobs_ok && (!outcome.remote || outcome.remote->failed == 0);
}

bool any_bad_input(const Outcome& outcome) {
  return std::any_of(outcome.results.begin(), outcome.results.end(),
                     [](const JobResult& result) { return result.status == Status::failed && result.bad_input; });
}

}  // namespace kiln::cli::prewarm
