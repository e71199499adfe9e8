// kiln prewarm: compile requests into the cache without loading them (no GPU needed for named
// targets). At -j above 1, every request that has to compile runs in a worker process (`kiln prewarm
// --worker`, this binary re-executed) that takes one request at a time over a pipe and answers one
// JSON line each: HIPRTC serializes inside a process, and NVRTC instances contend inside one (a 70 ms
// compile took 250 ms at 16 threads), so both vendors scale across processes, not threads. Requests
// go out from one queue, biggest source first, to whichever worker is idle. A worker that dies
// (HIPRTC can abort the process; someone can kill it) fails only the request it held; a fresh worker
// takes the rest. Requests already in the local cache, a lone compile, -j 1 and `--workers thread`
// run on this process's engine (Engine::prewarm is thread-safe).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <variant>

#include <fmt/format.h>

#include "common.hpp"
#include "kiln/base/log.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "kiln/tooling/manifest.hpp"
#include "kiln/tooling/targets.hpp"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;

/// A failure reason for a line of text output: compile errors carry the whole log, which --verbose
/// (or --json) prints in full.
std::string short_reason(const std::string& reason) {
  constexpr std::size_t kMax = 300;
  return reason.size() <= kMax ? reason : reason.substr(0, kMax) + "...";
}

struct PrewarmArgs {
  std::vector<std::string> targets;
  bool all_builtin = false;
  std::vector<std::string> builtins;
  std::vector<std::string> sources;
  std::vector<std::string> headers;
  std::vector<std::string> kernels;
  std::vector<std::string> options;
  std::vector<std::string> option_sets;
  std::vector<std::string> manifests;
  bool one_program = false;
  unsigned jobs = 0;
  bool json = false;
  bool quiet = false;
  bool verbose = false;
  bool worker = false;
  bool remote = false;
  std::string workers = "process";  ///< how -j runs compiles in parallel: "process" or "thread"
};

/// One request to compile. `request` holds what a worker needs to rebuild the source (a built-in's
/// name, or a runtime source's text and user headers); `source` is that source, built once.
struct Job {
  detail::ManifestRecord request;
  std::optional<Source> source;
  Vendor vendor = Vendor::none;
  std::vector<std::string> kernels;  ///< for messages: the kernels this request serves
  [[nodiscard]] std::string label() const {
    std::string text = fmt::format("{} [{}] {}", request.source_name, fmt::join(kernels, ", "), request.target);
    if (!request.options.empty()) text += fmt::format(" {{{}}}", fmt::join(request.options, " "));
    return text;
  }
};

enum class Status { pending, compiled, cached, failed };

std::string_view to_string(Status status) {
  switch (status) {
    case Status::compiled:
      return "compiled";
    case Status::cached:
      return "cached";
    case Status::failed:
      return "failed";
    case Status::pending:
      break;
  }
  return "pending";
}

struct JobResult {
  Status status = Status::pending;
  std::string key;
  double seconds = 0;
  std::uint64_t bytes = 0;
  std::string error;
  std::string log;  ///< the compiler's log for a failed compile
};

json result_json(std::size_t index, const JobResult& result) {
  return {{"i", index},
          {"status", std::string(to_string(result.status))},
          {"key", result.key},
          {"seconds", result.seconds},
          {"bytes", result.bytes},
          {"error", result.error},
          {"log", result.log}};
}

JobResult result_from_json(const json& object) {
  JobResult result;
  const std::string status = object.at("status").get<std::string>();
  result.status = status == "compiled" ? Status::compiled : status == "cached" ? Status::cached : Status::failed;
  result.key = object.at("key").get<std::string>();
  result.seconds = object.at("seconds").get<double>();
  result.bytes = object.at("bytes").get<std::uint64_t>();
  result.error = object.at("error").get<std::string>();
  result.log = object.at("log").get<std::string>();
  return result;
}

Source make_source(const detail::ManifestRecord& request) {
  if (request.builtin) return Source::builtin(request.source_name);
  return Source::from_text(request.source_name, request.source_text, request.headers);
}

/// Runs one request on this process's engine. Never throws.
JobResult execute(Engine& engine, const Job& job) {
  JobResult result;
  try {
    const Source source = job.source ? *job.source : make_source(job.request);
    const Options options(job.request.options);
    const PrewarmResult prewarmed = engine.prewarm(source, options, job.request.name_expressions, job.request.target);
    result.key = prewarmed.key.hex();
    result.seconds = prewarmed.seconds;
    result.bytes = prewarmed.binary_bytes;
    if (prewarmed.origin == Origin::compiled && !prewarmed.stored) {
      result.status = Status::failed;
      const cache::Store& store = engine.store();
      result.error =
          fmt::format("compiled, but the cache did not store it (cache {} is {}{}{})", store.config().root.string(),
                      cache::to_string(store.mode()), store.mode_reason().empty() ? "" : ": ", store.mode_reason());
    } else {
      result.status = prewarmed.origin == Origin::compiled ? Status::compiled : Status::cached;
    }
  } catch (const CompileError& error) {
    result.status = Status::failed;
    result.error = one_line(error.what());
    result.log = error.log();
  } catch (const std::exception& error) {
    result.status = Status::failed;
    result.error = one_line(error.what());
  }
  return result;
}

// ---- progress -------------------------------------------------------------------------------------

class Progress {
 public:
  Progress(const std::vector<Job>& jobs, bool quiet)
      : m_jobs(jobs), m_quiet(quiet), m_tty(::isatty(STDERR_FILENO) != 0), m_start(Clock::now()) {
    draw_locked();
  }

  void done(std::size_t index, const JobResult& result) {
    const std::lock_guard lock(m_mutex);
    ++m_done;
    ++m_counts[static_cast<int>(result.status)];
    if (m_quiet) return;
    if (m_tty) {
      draw_locked();
      return;
    }
    const std::string what = result.status == Status::failed
                                 ? fmt::format("FAILED: {}", short_reason(result.error))
                                 : fmt::format("{} ({})", to_string(result.status), format_seconds(result.seconds));
    std::cerr << fmt::format("[{}/{}] {} {}\n", m_done, m_jobs.size(), m_jobs[index].label(), what);
  }

  void finish() {
    const std::lock_guard lock(m_mutex);
    if (!m_quiet && m_tty && !m_jobs.empty()) std::cerr << '\n';
  }

 private:
  void draw_locked() {
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

  const std::vector<Job>& m_jobs;
  bool m_quiet;
  bool m_tty;
  Clock::time_point m_start;
  std::mutex m_mutex;
  std::size_t m_done = 0;
  std::size_t m_counts[4] = {};
};

// ---- running ----------------------------------------------------------------------------------------

void run_on_threads(Engine& engine, const std::vector<Job>& jobs, const std::vector<std::size_t>& indices,
                    unsigned threads, std::vector<JobResult>& results, Progress& progress) {
  parallel_for(indices.size(), std::max(1U, threads), [&](std::size_t k) {
    const std::size_t index = indices[k];
    results[index] = execute(engine, jobs[index]);
    progress.done(index, results[index]);
  });
}

/// A `kiln prewarm --worker` child: requests go to its stdin, results come back on its stdout.
struct Worker {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;
  std::string buffer;
  std::optional<std::size_t> job;
};

std::string describe_exit(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return "stopped";
}

std::optional<Worker> spawn_worker(std::string& error) {
  int to_child[2];
  int from_child[2];
  if (::pipe2(to_child, O_CLOEXEC) != 0) {
    error = fmt::format("pipe failed: {}", std::strerror(errno));
    return std::nullopt;
  }
  if (::pipe2(from_child, O_CLOEXEC) != 0) {
    error = fmt::format("pipe failed: {}", std::strerror(errno));
    ::close(to_child[0]);
    ::close(to_child[1]);
    return std::nullopt;
  }
  char arg0[] = "kiln";
  char arg1[] = "prewarm";
  char arg2[] = "--worker";
  char* const argv[] = {arg0, arg1, arg2, nullptr};
  const pid_t pid = ::fork();
  if (pid < 0) {
    error = fmt::format("fork failed: {}", std::strerror(errno));
    for (const int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
    return std::nullopt;
  }
  if (pid == 0) {
    // Only async-signal-safe calls until exec.
    if (::dup2(to_child[0], STDIN_FILENO) < 0 || ::dup2(from_child[1], STDOUT_FILENO) < 0) ::_exit(127);
    ::execv("/proc/self/exe", argv);
    ::_exit(127);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  Worker worker;
  worker.pid = pid;
  worker.to_child = to_child[1];
  worker.from_child = from_child[0];
  return worker;
}

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

void run_in_workers(const std::vector<Job>& jobs, const std::vector<std::size_t>& indices, unsigned count,
                    std::vector<JobResult>& results, Progress& progress) {
  // A worker that dies must not take this process with it when we write to its pipe.
  struct sigaction ignore {};
  struct sigaction previous {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);

  std::deque<std::size_t> pending(indices.begin(), indices.end());
  std::vector<Worker> workers;
  std::size_t spawns_left = count + indices.size();  // a replacement per request at most
  std::string spawn_error;
  const auto finish_job = [&](std::size_t index, JobResult result) {
    results[index] = std::move(result);
    progress.done(index, results[index]);
  };
  const auto fill = [&] {
    const auto busy = static_cast<std::size_t>(
        std::count_if(workers.begin(), workers.end(), [](const Worker& worker) { return worker.job.has_value(); }));
    while (workers.size() < std::min<std::size_t>(count, pending.size() + busy) && spawns_left > 0) {
      --spawns_left;
      auto worker = spawn_worker(spawn_error);
      if (!worker) break;
      workers.push_back(std::move(*worker));
    }
  };
  const auto reap = [&](Worker& worker) -> std::string {
    if (worker.to_child >= 0) ::close(worker.to_child);
    ::close(worker.from_child);
    int status = 0;
    while (::waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
    }
    return describe_exit(status);
  };

  std::size_t outstanding = indices.size();
  fill();
  while (outstanding > 0) {
    if (workers.empty()) {
      // No worker could be started: fail what is left with the reason.
      while (!pending.empty()) {
        finish_job(
            pending.front(),
            JobResult{Status::failed, {}, 0, 0, fmt::format("cannot start a worker process: {}", spawn_error), {}});
        pending.pop_front();
        --outstanding;
      }
      break;
    }
    for (Worker& worker : workers) {
      if (worker.job || pending.empty()) continue;
      const std::size_t index = pending.front();
      pending.pop_front();
      worker.job = index;
      // A failed write means the worker died; its EOF below reports the request as failed.
      (void)write_all(worker.to_child, fmt::format("{}\t{}\n", index, detail::manifest_line(jobs[index].request)));
    }
    std::vector<pollfd> fds;
    for (const Worker& worker : workers) fds.push_back({worker.from_child, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("poll failed: {}", std::strerror(errno)));
    }
    for (std::size_t w = 0; w < workers.size(); ++w) {
      if (fds[w].revents == 0) continue;
      Worker& worker = workers[w];
      char chunk[65536];
      const ssize_t n = ::read(worker.from_child, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        worker.buffer.append(chunk, static_cast<std::size_t>(n));
        for (std::size_t newline; (newline = worker.buffer.find('\n')) != std::string::npos;) {
          const std::string line = worker.buffer.substr(0, newline);
          worker.buffer.erase(0, newline + 1);
          try {
            const json object = json::parse(line);
            const auto index = object.at("i").get<std::size_t>();
            if (!worker.job || *worker.job != index) throw std::runtime_error("answer for another request");
            finish_job(index, result_from_json(object));
          } catch (const std::exception& error) {
            if (worker.job) {
              finish_job(
                  *worker.job,
                  JobResult{
                      Status::failed, {}, 0, 0, fmt::format("worker sent a malformed answer: {}", error.what()), {}});
            }
          }
          worker.job.reset();
          --outstanding;
        }
        continue;
      }
      // EOF or read error: the worker is gone.
      const std::string how = reap(worker);
      if (worker.job) {
        finish_job(
            *worker.job,
            JobResult{Status::failed, {}, 0, 0, fmt::format("worker process died while compiling: {}", how), {}});
        --outstanding;
      }
      worker.pid = -1;
    }
    std::erase_if(workers, [](const Worker& worker) { return worker.pid < 0; });
    fill();
  }
  // Tell every worker at once that there is no more work (EOF on its stdin). Each then persists its
  // statistics and closes its answer pipe before it exits; waiting for that EOF (not for the exit)
  // means everything it did is on disk, while the kernel's teardown of its address space (~0.1 s for
  // 16 NVRTC workers on the H200 host) does not delay this command. Workers that have exited by then
  // are reaped; the rest are left to init.
  for (Worker& worker : workers) {
    ::close(worker.to_child);
    worker.to_child = -1;
  }
  for (Worker& worker : workers) {
    char chunk[4096];
    for (ssize_t n; (n = ::read(worker.from_child, chunk, sizeof chunk)) != 0;) {
      if (n < 0 && errno != EINTR) break;
    }
    ::close(worker.from_child);
    int status = 0;
    (void)::waitpid(worker.pid, &status, WNOHANG);
  }
  ::sigaction(SIGPIPE, &previous, nullptr);
}

/// Ends this process without tearing anything down, after persisting the engine's lifetime counters
/// (what its destructor would do), flushing output and closing `close_file` (a worker's answer pipe:
/// the parent's signal that all is on disk). Unloading and finalizing a compiler library that has
/// compiled is slow (tens of ms per process, measured at -j 16 on the 16-CPU H200 host), and it
/// would be paid by every worker and by the parent after all the work is done.
[[noreturn]] void exit_without_teardown(Engine& engine, int code, std::FILE* close_file = nullptr) {
  if (engine.store().mode() == cache::StoreMode::read_write) {
    cache::PersistentStats(engine.store().config().root).add(engine.stats());
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  if (close_file != nullptr) std::fclose(close_file);
  ::_exit(code);
}

/// `kiln prewarm --worker`: one request per stdin line ("<index>\t<manifest line>"), one JSON answer
/// per stdout line, until EOF. Library output that would go to stdout is sent to stderr instead.
int run_worker() {
  const int protocol_fd = ::dup(STDOUT_FILENO);
  if (protocol_fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) return kExitError;
  FILE* protocol = ::fdopen(protocol_fd, "w");
  if (protocol == nullptr) return kExitError;
  EngineConfig config = EngineConfig::from_environment();
  config.runtime = false;  // a worker only compiles named targets: no cuInit, no device query
  Engine engine(config);
  KILN_LOG(debug, "prewarm worker {}: ready", ::getpid());
  std::string line;
  while (std::getline(std::cin, line)) {
    const std::size_t tab = line.find('\t');
    if (tab == std::string::npos) return kExitError;
    const auto index = static_cast<std::size_t>(std::stoull(line.substr(0, tab)));
    JobResult result;
    try {
      Job job;
      job.request = detail::parse_manifest_line(std::string_view(line).substr(tab + 1));
      result = execute(engine, job);
    } catch (const std::exception& error) {
      result.status = Status::failed;
      result.error = one_line(error.what());
    }
    const std::string answer = result_json(index, result).dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    if (std::fwrite(answer.data(), 1, answer.size(), protocol) != answer.size() || std::fflush(protocol) != 0) {
      exit_without_teardown(engine, kExitError, protocol);
    }
  }
  KILN_LOG(debug, "prewarm worker {}: no more work", ::getpid());
  exit_without_teardown(engine, kExitOk, protocol);
}

// ---- building the requests ---------------------------------------------------------------------------

std::vector<std::string> split_options(std::string_view text) {
  std::vector<std::string> out;
  std::istringstream in{std::string(text)};
  for (std::string option; in >> option;) out.push_back(option);
  return out;
}

/// Validates an option list the way the engine will read it. Throws UsageError naming `flag`.
std::string canonical_options(const std::vector<std::string>& options, std::string_view flag) {
  try {
    return Options(options).canonical();
  } catch (const Error& error) {
    throw UsageError(fmt::format("{}: {}", flag, error.what()));
  }
}

std::vector<std::string> resolve_targets(const PrewarmArgs& args, Engine& engine) {
  std::vector<std::string> targets;
  const auto add = [&](const std::string& target) {
    if (std::find(targets.begin(), targets.end(), target) == targets.end()) targets.push_back(target);
  };
  for (const std::string& target : args.targets) {
    if (target != "native") {
      add(target);
      continue;
    }
    const std::vector<DeviceInfo> devices = engine.devices();
    if (devices.empty()) {
      std::string lanes;
      for (const LaneInfo& lane : engine.lanes())
        lanes += fmt::format("; {}: {}", kiln::to_string(lane.vendor), lane.status);
      throw UsageError(fmt::format("--target native: this machine has no GPU{}", lanes));
    }
    for (const DeviceInfo& device : devices) add(device.target);
  }
  if (args.targets.empty()) {
    for (const std::string& target : engine.default_targets()) add(target);
  }
  for (const std::string& target : targets) {
    try {
      (void)detail::parse_target(target);
    } catch (const Error& error) {
      throw UsageError(fmt::format("--target {}: {}", target, error.what()));
    }
  }
  return targets;
}

Header read_header_flag(const std::string& spec) {
  const std::size_t equals = spec.find('=');
  const std::filesystem::path path = equals == std::string::npos ? spec : spec.substr(equals + 1);
  Header header;
  header.name = equals == std::string::npos ? path.filename().string() : spec.substr(0, equals);
  if (header.name.empty()) throw UsageError(fmt::format("--header '{}': empty header name", spec));
  header.text = read_text_file(path, "--header");
  return header;
}

/// Refuses, with one line, a target the engine cannot compile for (unknown to its compiler, or the
/// compiler is missing) and an --option the target's compiler has no spelling for; otherwise every
/// request for it would fail the same way. Builds keys only: nothing is compiled.
void validate_jobs(const std::vector<Job>& jobs, const std::vector<std::vector<std::string>>& option_sets,
                   Engine& engine) {
  std::set<std::string> targets;
  std::set<Vendor> vendors;
  for (const Job& job : jobs) {
    if (!targets.insert(job.request.target).second) continue;
    vendors.insert(job.vendor);
    try {
      (void)engine.describe_key(*job.source, Options(), {}, job.request.target);
    } catch (const Error& error) {
      throw UsageError(error.what());
    }
  }
  for (const auto& options : option_sets) {
    for (const Vendor vendor : vendors) {
      try {
        (void)Options(options).vendor_flags(vendor);
      } catch (const Error& error) {
        throw UsageError(fmt::format("--option: {}", error.what()));
      }
    }
  }
}

struct SourceSpec {
  detail::ManifestRecord request;  // source fields only
  Source source;
  std::vector<std::string> kernels;
};

std::vector<Job> build_jobs(const PrewarmArgs& args, Engine& engine) {
  std::vector<SourceSpec> specs;
  const auto add_builtin = [&](const std::string& name, bool explicit_kernels) {
    Source source = Source::builtin(name);
    std::vector<std::string> kernels = explicit_kernels ? args.kernels : source.listed_kernels();
    if (kernels.empty()) {
      if (!args.all_builtin || explicit_kernels) {
        throw UsageError(fmt::format("built-in {}: no --kernel given and it lists no kernels", source.name()));
      }
      return;
    }
    detail::ManifestRecord request;
    request.source_name = source.name();
    request.builtin = true;
    request.source_hash = source.content_hash().hex();
    specs.push_back({std::move(request), std::move(source), std::move(kernels)});
  };
  if (args.all_builtin) {
    for (const std::string& name : Source::builtin_names()) add_builtin(name, false);
  }
  for (const std::string& name : args.builtins) {
    try {
      add_builtin(name, !args.kernels.empty());
    } catch (const ConfigError& error) {
      throw UsageError(fmt::format("--builtin {}: {}", name, error.what()));
    }
  }
  std::vector<Header> headers;
  for (const std::string& spec : args.headers) headers.push_back(read_header_flag(spec));
  for (const std::string& file : args.sources) {
    detail::ManifestRecord request;
    request.source_name = std::filesystem::path(file).filename().string();
    request.source_text = read_text_file(file, "--source");
    request.headers = headers;
    Source source = Source::from_text(request.source_name, request.source_text, request.headers);
    request.source_hash = source.content_hash().hex();
    std::vector<std::string> kernels = args.kernels.empty() ? source.listed_kernels() : args.kernels;
    if (kernels.empty()) {
      throw UsageError(
          fmt::format("--source {}: give --kernel NAME (or list kernels on a '//! kiln-kernels:' first line)", file));
    }
    specs.push_back({std::move(request), std::move(source), std::move(kernels)});
  }
  if (!args.kernels.empty() && args.sources.empty() && args.builtins.empty()) {
    throw UsageError("--kernel needs --source FILE or --builtin NAME");
  }
  if (!args.headers.empty() && args.sources.empty()) throw UsageError("--header needs --source FILE");

  std::vector<std::vector<std::string>> option_sets;
  if (args.option_sets.empty()) {
    option_sets.push_back(args.options);
  } else {
    for (const std::string& set : args.option_sets) {
      std::vector<std::string> options = args.options;
      for (std::string& option : split_options(set)) options.push_back(std::move(option));
      option_sets.push_back(std::move(options));
    }
  }
  for (const auto& options : option_sets) (void)canonical_options(options, "--option");

  std::vector<detail::ManifestRecord> recorded;
  for (const std::string& manifest : args.manifests) {
    for (detail::ManifestRecord& record : detail::read_manifest(manifest)) recorded.push_back(std::move(record));
  }
  if (specs.empty() && recorded.empty()) {
    throw UsageError("nothing to prewarm: give --all-builtin, --builtin NAME, --source FILE or --manifest FILE");
  }

  const std::vector<std::string> targets =
      (!specs.empty() || !args.targets.empty()) ? resolve_targets(args, engine) : std::vector<std::string>{};

  std::vector<Job> jobs;
  std::set<std::string> seen;
  const auto add_job = [&](Job job) {
    job.vendor = detail::parse_target(job.request.target).vendor;
    const std::string identity =
        fmt::format("{}\n{}\n{}\n{}", job.source->content_hash().hex(), fmt::join(job.request.name_expressions, "\x1f"),
                    canonical_options(job.request.options, "--option"), job.request.target);
    if (seen.insert(identity).second) jobs.push_back(std::move(job));
  };
  for (const SourceSpec& spec : specs) {
    const auto sets = name_sets(spec.kernels, args.one_program);
    for (const auto& names : sets) {
      std::vector<std::string> served = names;
      if (names.empty()) {
        for (const std::string& kernel : spec.kernels) {
          if (is_plain_name(kernel)) served.push_back(kernel);
        }
      }
      for (const auto& options : option_sets) {
        for (const std::string& target : targets) {
          Job job;
          job.request = spec.request;
          job.request.name_expressions = names;
          job.request.options = options;
          job.request.target = target;
          job.source = spec.source;
          job.kernels = served;
          add_job(std::move(job));
        }
      }
    }
  }
  std::set<std::string> warned;
  for (const detail::ManifestRecord& record : recorded) {
    Source source = [&] {
      try {
        return make_source(record);
      } catch (const Error& error) {
        throw UsageError(fmt::format("--manifest: {}", error.what()));
      }
    }();
    if (record.builtin && source.content_hash().hex() != record.source_hash &&
        warned.insert(record.source_name).second && !args.quiet) {
      std::cerr << fmt::format(
          "kiln: note: built-in {} changed since the manifest was recorded; prewarming the "
          "current version\n",
          record.source_name);
    }
    const std::vector<std::string> record_targets =
        args.targets.empty() ? std::vector<std::string>{record.target} : targets;
    for (const std::string& target : record_targets) {
      try {
        (void)detail::parse_target(target);
      } catch (const Error& error) {
        throw UsageError(fmt::format("--manifest: target {}: {}", target, error.what()));
      }
      Job job;
      job.request = record;
      job.request.target = target;
      job.source = source;
      job.kernels =
          record.name_expressions.empty() ? std::vector<std::string>{"extern \"C\" kernels"} : record.name_expressions;
      add_job(std::move(job));
    }
  }
  validate_jobs(jobs, option_sets, engine);
  return jobs;
}

// ---- the remote tier -------------------------------------------------------------------------------------

struct RemoteFill {
  std::string url;  ///< without the password
  std::size_t written = 0;
  std::size_t failed = 0;
  std::set<std::string> reasons;
};

/// Writes every entry that was compiled or already cached to the remote tier (KILN_REMOTE_CACHE),
/// synchronously, reading each from the local store with the same parser the engine uses.
RemoteFill fill_remote(Engine& engine, const std::vector<JobResult>& results) {
  RemoteFill fill;
  const std::string url = EngineConfig::from_environment().remote;
  fill.url = cache::redact_remote_url(url);
  cache::RemoteConfig config = cache::remote_config_from_environment(url);
  config.lease_wait = std::chrono::milliseconds(0);
  const std::unique_ptr<cache::RemoteTier> remote = cache::open_remote(config);
  fill.url = config.display();
  for (const JobResult& result : results) {
    if (result.status != Status::compiled && result.status != Status::cached) continue;
    const std::optional<cache::Hash128> hash = cache::Hash128::from_hex(result.key);
    if (!hash) continue;
    auto read = engine.store().read_file(engine.store().entry_path(*hash));
    std::string why;
    if (auto* entry = std::get_if<cache::Entry>(&read)) {
      if (remote->put(*entry, &why)) {
        ++fill.written;
        continue;
      }
    } else {
      why = "local entry unreadable: " + std::get<cache::ContentError>(read).reason;
    }
    ++fill.failed;
    fill.reasons.insert(why);
  }
  return fill;
}

// ---- where each request runs ------------------------------------------------------------------------

/// The one policy for both vendors: which requests run on this process's threads, which go to worker
/// processes, and how many workers.
struct Plan {
  std::vector<std::size_t> in_process;
  std::vector<std::size_t> in_workers;  ///< biggest source first
  unsigned workers = 0;
};

/// A request whose entry is already in the local store: serving it is a file read, cheaper than
/// starting a worker (a damaged entry is removed and recompiled here, as the engine always does).
bool locally_cached(Engine& engine, const Job& job) {
  try {
    const auto key = engine.describe_key(*job.source, Options(job.request.options), job.request.name_expressions,
                                         job.request.target);
    std::error_code ignored;
    return std::filesystem::is_regular_file(engine.store().entry_path(key.first), ignored);
  } catch (const std::exception&) {
    return false;  // let the request itself report what is wrong
  }
}

/// A size estimate of a compile, for longest-first: the bytes the request hands the compiler beyond
/// kiln's own headers (which every request has). A proxy: compile times of the built-ins (45-130 ms
/// with NVRTC) grow roughly with their source's size; nothing better is known before compiling.
std::size_t estimated_cost(const Job& job) {
  std::size_t bytes = job.source->text().size();
  for (const Header& header : job.request.headers) bytes += header.text.size();
  return bytes;
}

Plan plan_jobs(Engine& engine, const std::vector<Job>& jobs, unsigned parallel, bool use_processes) {
  Plan plan;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const bool process = use_processes && parallel > 1 && !locally_cached(engine, jobs[i]);
    (process ? plan.in_workers : plan.in_process).push_back(i);
  }
  if (plan.in_workers.size() == 1) {
    // One compile gains nothing from a process of its own.
    plan.in_process.push_back(plan.in_workers.front());
    plan.in_workers.clear();
    std::sort(plan.in_process.begin(), plan.in_process.end());
  }
  std::stable_sort(plan.in_workers.begin(), plan.in_workers.end(), [&](std::size_t a, std::size_t b) {
    return estimated_cost(jobs[a]) > estimated_cost(jobs[b]);
  });
  plan.workers = std::min<unsigned>(parallel, static_cast<unsigned>(plan.in_workers.size()));
  return plan;
}

// ---- the command ---------------------------------------------------------------------------------------

int run_prewarm(const PrewarmArgs& args) {
  if (args.worker) return run_worker();
  if (args.remote && EngineConfig::from_environment().remote.empty()) {
    throw UsageError("--remote: set KILN_REMOTE_CACHE=redis://[user:password@]host:port[/db] first");
  }
  const auto start = Clock::now();
  // Named targets need no GPU runtime: no cuInit at start, no driver teardown at exit. The local GPUs
  // are asked for only for `native` and when no target is given (the defaults are the local GPUs').
  EngineConfig config = EngineConfig::from_environment();
  config.runtime = args.targets.empty() ||
                   std::find(args.targets.begin(), args.targets.end(), "native") != args.targets.end();
  Engine engine(config);
  const auto since_start = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); };
  const std::vector<Job> jobs = build_jobs(args, engine);
  const unsigned parallel = args.jobs == 0 ? default_threads() : args.jobs;
  KILN_LOG(debug, "prewarm: {} requests built and validated at {:.1f} ms", jobs.size(), since_start());

  const Plan plan = plan_jobs(engine, jobs, parallel, args.workers == "process");
  KILN_LOG(debug, "prewarm: planned at {:.1f} ms: {} in this process, {} in {} workers", since_start(),
           plan.in_process.size(), plan.in_workers.size(), plan.workers);
  std::vector<JobResult> results(jobs.size());
  Progress progress(jobs, args.quiet || args.json);
  run_on_threads(engine, jobs, plan.in_process, parallel, results, progress);
  if (!plan.in_workers.empty()) {
    KILN_LOG(debug, "prewarm: starting {} workers at {:.1f} ms", plan.workers, since_start());
    run_in_workers(jobs, plan.in_workers, plan.workers, results, progress);
    KILN_LOG(debug, "prewarm: workers done at {:.1f} ms", since_start());
  }
  progress.finish();
  std::optional<RemoteFill> remote;
  if (args.remote) remote = fill_remote(engine, results);
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();

  std::size_t counts[4] = {};
  double compile_seconds = 0;
  for (const JobResult& result : results) {
    ++counts[static_cast<int>(result.status)];
    if (result.status == Status::compiled) compile_seconds += result.seconds;
  }
  std::set<std::string> target_set;
  for (const Job& job : jobs) target_set.insert(job.request.target);
  const std::size_t failed = counts[static_cast<int>(Status::failed)];

  if (args.json) {
    json requests = json::array();
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const Job& job = jobs[i];
      const JobResult& result = results[i];
      json item = {{"source", job.request.source_name},
                   {"builtin", job.request.builtin},
                   {"kernels", job.kernels},
                   {"names", job.request.name_expressions},
                   {"options", job.request.options},
                   {"target", job.request.target},
                   {"status", std::string(to_string(result.status))},
                   {"key", result.key},
                   {"seconds", result.seconds},
                   {"bytes", result.bytes}};
      if (result.status == Status::failed) {
        item["error"] = result.error;
        if (args.verbose) item["log"] = result.log;
      }
      requests.push_back(std::move(item));
    }
    print_json({{"requests", std::move(requests)},
                {"summary",
                 {{"requests", jobs.size()},
                  {"compiled", counts[static_cast<int>(Status::compiled)]},
                  {"cached", counts[static_cast<int>(Status::cached)]},
                  {"failed", failed},
                  {"targets", target_set},
                  {"jobs", parallel},
                  {"wall_seconds", wall},
                  {"compile_seconds", compile_seconds},
                  {"remote_written", remote ? remote->written : 0},
                  {"remote_failed", remote ? remote->failed : 0}}}});
    exit_without_teardown(engine, failed == 0 && (!remote || remote->failed == 0) ? kExitOk : kExitFound);
  }

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
    if (args.verbose) {
      for (const std::size_t i : indices) {
        if (!results[i].log.empty()) std::cout << fmt::format("--- log of {}:\n{}\n", jobs[i].label(), results[i].log);
      }
    }
  }
  std::cout << fmt::format(
      "prewarm: {} requests for {}: {} compiled, {} already cached, {} failed; {} wall, {} compiling (-j {})\n",
      jobs.size(), fmt::join(target_set, ", "), counts[static_cast<int>(Status::compiled)],
      counts[static_cast<int>(Status::cached)], failed, format_seconds(wall), format_seconds(compile_seconds),
      parallel);
  if (failed > 0 && !args.verbose) std::cout << "(--verbose prints the compiler logs)\n";
  if (remote) {
    std::cout << fmt::format("remote: {} entries written to {}{}\n", remote->written, remote->url,
                             remote->failed ? fmt::format(", {} failed", remote->failed) : std::string());
    for (const std::string& why : remote->reasons) std::cout << "  remote failure: " << why << '\n';
  }
  exit_without_teardown(engine, failed == 0 && (!remote || remote->failed == 0) ? kExitOk : kExitFound);
}

}  // namespace

void add_prewarm_command(CLI::App& app, Commands& commands) {
  auto args = std::make_shared<PrewarmArgs>();
  CLI::App* sub = app.add_subcommand("prewarm",
                                     "Compile kernels into the cache without loading them (no GPU needed "
                                     "for named targets)");
  sub->footer(
      "Requests: each plain kernel name of a source shares one program, each name expression is a program of its own\n"
      "(exactly what Engine::kernel(source, name) asks for, so those requests hit); --one-program compiles all of a\n"
      "source's kernels as one program (what Engine::program(source, options, kernels) asks for).\n"
      "Options start with '-': write them as --option=--fast-math or --option -DN=4.\n"
      "With -j above 1, compiles run in worker processes (see --workers); a worker that dies fails only the request\n"
      "it held, reported with the signal or exit status, and a fresh worker takes the rest.\n"
      "Examples:\n"
      "  kiln prewarm --all-builtin --target sm_90 --target gfx90a -j 16\n"
      "  kiln prewarm --source my.cu --kernel 'scale<float, 4>' --option=-DTILE=8 --target native\n"
      "  KILN_RECORD=app.jsonl ./app; kiln prewarm --manifest app.jsonl --target sm_100");
  sub->add_option("-t,--target", args->targets,
                  "Target (repeatable): sm_90, sm_90a, compute_90, gfx90a, gfx90a:sramecc+:xnack-, or native (the "
                  "local GPUs). Default: the local GPUs' targets, or sm_90 and gfx90a without a GPU");
  sub->add_flag("--all-builtin", args->all_builtin, "Every built-in source, with the kernels its first line lists");
  sub->add_option("--builtin", args->builtins, "A built-in source by name, e.g. saxpy (repeatable)");
  sub->add_option("--source", args->sources, "A kernel source file (repeatable)");
  sub->add_option("--header", args->headers,
                  "An in-memory header for --source: FILE or NAME=FILE, seen as #include \"NAME\" (repeatable)");
  sub->add_option("-k,--kernel", args->kernels,
                  "A kernel name or name expression for --source/--builtin (repeatable); default: the source's "
                  "'//! kiln-kernels:' line");
  sub->add_option("-o,--option", args->options, "A portable compile option (repeatable), e.g. --option=--fast-math");
  sub->add_option("--option-set", args->option_sets,
                  "A whitespace-separated option set (repeatable): every request is compiled once per set");
  sub->add_option("--manifest", args->manifests,
                  "A manifest recorded with KILN_RECORD (repeatable); replayed for --target when given, else for the "
                  "recorded targets");
  sub->add_flag("--one-program", args->one_program, "Compile each source's kernels as one program");
  sub->add_option("-j,--jobs", args->jobs, "Parallel compiles; default: the number of cores")
      ->check(CLI::Range(1U, 1024U));
  sub->add_option("--workers", args->workers,
                  "How -j runs compiles: process (default: worker processes, one request each at a time; NVRTC "
                  "and HIPRTC both scale across processes, not threads) or thread (threads of this process; HIPRTC "
                  "then compiles one at a time). Cached requests, a lone compile and -j 1 run in this process")
      ->check(CLI::IsMember({"process", "thread"}));
  sub->add_flag("--remote", args->remote,
                "Also write every compiled or already-cached entry to the remote cache (KILN_REMOTE_CACHE)");
  sub->add_flag("--json", args->json, "Print JSON (per request and a summary) instead of text");
  sub->add_flag("-q,--quiet", args->quiet, "No progress output");
  sub->add_flag("-v,--verbose", args->verbose, "Print the compiler log of failed requests");
  sub->add_flag("--worker", args->worker, "Internal: serve requests from stdin (the worker process of -j)")
      ->group("");
  commands.push_back({sub, [args] { return run_prewarm(*args); }});
}

}  // namespace kiln::cli
