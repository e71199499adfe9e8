#pragma once
// kiln prewarm's planner: the requests the command's flags name (built-ins, source files, request logs
// recorded with KILN_RECORD, option sets, targets) become jobs, deduplicated and validated before
// anything compiles; then the plan of where each job runs.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "kiln/engine.hpp"
#include "kiln/tooling/request_log.hpp"

namespace kiln::cli::prewarm {

/// What to prewarm: the command's request flags.
struct Requests {
  std::vector<std::string> targets;
  bool all_builtin = false;
  std::vector<std::string> builtins;
  std::vector<std::string> sources;
  std::vector<std::string> headers;
  std::vector<std::string> kernels;
  std::vector<std::string> options;
  std::vector<std::string> include_dirs;  ///< -I/--include-path: after every --option, in order
  bool toolkit_includes = false;          ///< --toolkit-includes
  std::vector<std::string> option_sets;
  std::vector<std::string> request_logs;  ///< --manifest: request logs recorded with KILN_RECORD
  bool one_program = false;
};

/// One request to compile. `request` holds what a worker needs to rebuild the source (a built-in's
/// name, or a runtime source's text and user headers); `source` is that source, built once.
struct Job {
  detail::RecordedRequest request;
  std::optional<Source> source;
  Vendor vendor = Vendor::none;
  std::vector<std::string> kernels;  ///< for messages: the kernels this request serves
  /// Plain kernel names the binary must define: looked up by symbol later, so not in the request's key
  /// (Engine::prewarm's `kernels`).
  std::vector<std::string> plain_kernels;
  /// Where a recorded request came from ("manifest m.jsonl line 3", after the --manifest flag that named
  /// its request log), for its errors; empty otherwise.
  std::string origin;
  bool target_from_flags = false;  ///< a recorded request replayed for a --target, not its recorded one
  /// A recorded request that cannot be made here (an unknown built-in, a target or option the compiler
  /// cannot take, a missing include folder, ...): why, naming its line. It is not run: it is reported
  /// as a failed request of bad input, and the request log's other requests run (source may be empty).
  std::string refused;
  /// The request as planned once when the jobs are validated (Engine::plan_prewarm: no compile, no header
  /// read): its key when that needs no resolve, which the plan asks the store for. Handed to the prewarm()
  /// that serves the request, here or in a worker, which then settles its includes once, itself. Empty when
  /// the request could not be made (it then reports why when it runs).
  std::optional<PrewarmPlan> planned;
  [[nodiscard]] std::string label() const;
};

/// The source a request names: a built-in, or a runtime source's text with its user headers.
[[nodiscard]] Source make_source(const detail::RecordedRequest& request);

/// The jobs the flags ask for: every source x name set x option set x target, then every request log
/// record (for its recorded target, or for each --target), without repeats. Refuses with UsageError
/// what every request would fail on (no requests, an unknown target, an option the target's compiler
/// cannot spell). `quiet`: no note about a built-in that changed since it was recorded.
[[nodiscard]] std::vector<Job> build_jobs(const Requests& requests, Engine& engine, bool quiet);

/// Where each job runs; the one policy for both vendors.
struct Plan {
  std::vector<std::size_t> in_process;  ///< on this process's engine
  std::vector<std::size_t> in_workers;  ///< in worker processes, biggest source first
  unsigned workers = 0;
};

/// With `use_processes` and `parallel` above 1, every job not known to be in the local store goes to
/// worker processes (a job whose key its plan could not tell without a resolve is not known to be: the
/// worker resolves it), unless it is the only one (a lone compile gains nothing from a process of its
/// own); the rest run in this process.
[[nodiscard]] Plan plan_jobs(Engine& engine, const std::vector<Job>& jobs, unsigned parallel, bool use_processes);

}  // namespace kiln::cli::prewarm
