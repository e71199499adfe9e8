// Running kiln prewarm's jobs: on this process's threads or in worker processes (worker_pool.hpp).
// The pipe protocol: the parent writes "<index>\t<plain kernels, a JSON array>\t<plan>\t<request log line>\n"
// per job, where <plan> is the job's plan (Engine::plan_prewarm) as JSON: null for none, else {"key": the
// key's hex, or null when the plan could not tell it}; JSON escapes tabs, so no field holds one. The worker
// answers one JSON object per line:
// {"i", "status", "key", "seconds", "wait_seconds", "bytes", "error", "log", "bad_input"}.
#include "worker_pool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "cli.hpp"
#include "formatting.hpp"
#include "json_output.hpp"
#include "kiln/base/log.hpp"
#include "kiln/error.hpp"
#include "kiln/tooling/request_log.hpp"
#include "parallel.hpp"

namespace kiln::cli::prewarm {

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

namespace {

JobResult failed_result(std::string why) {
  JobResult result;
  result.status = Status::failed;
  result.error = std::move(why);
  return result;
}

json result_json(std::size_t index, const JobResult& result) {
  return {{"i", index},
          {"status", std::string(to_string(result.status))},
          {"key", result.key},
          {"seconds", result.seconds},
          {"wait_seconds", result.wait_seconds},
          {"bytes", result.bytes},
          {"error", result.error},
          {"log", result.log},
          {"bad_input", result.bad_input}};
}

JobResult result_from_json(const json& object) {
  JobResult result;
  const std::string status = object.at("status").get<std::string>();
  result.status = status == "compiled" ? Status::compiled : status == "cached" ? Status::cached : Status::failed;
  result.key = object.at("key").get<std::string>();
  result.seconds = object.at("seconds").get<double>();
  result.wait_seconds = object.at("wait_seconds").get<double>();
  result.bytes = object.at("bytes").get<std::uint64_t>();
  result.error = object.at("error").get<std::string>();
  result.log = object.at("log").get<std::string>();
  result.bad_input = object.at("bad_input").get<bool>();
  return result;
}

/// A job's plan on the pipe: null for none, else {"key": hex or null}.
json plan_json(const std::optional<PrewarmPlan>& plan) {
  if (!plan) return nullptr;
  return {{"key", plan->key ? json(plan->key->hex()) : json(nullptr)}};
}

std::optional<PrewarmPlan> plan_from_json(const json& object) {
  if (object.is_null()) return std::nullopt;
  PrewarmPlan plan;
  const json& key = object.at("key");
  if (!key.is_null()) {
    plan.key = cache::Hash128::from_hex(key.get<std::string>());
    if (!plan.key) throw std::runtime_error("a job's plan names no key");
  }
  return plan;
}

/// A `kiln prewarm --worker` child: requests go to its stdin, results come back on its stdout, and what
/// it says on stderr comes through this process (StderrRelay).
struct Worker {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;
  int errors = -1;  ///< the read end of its stderr
  std::string buffer;
  std::string error_buffer;  ///< its stderr since the last whole line
  std::optional<std::size_t> job;
  std::string tmpdir;  ///< its TMPDIR, private to it: removed when it ends, however it ends
};

/// Removes a worker's TMPDIR with what the compilers left there (HIPRTC's comgr-XXXXXX folders, PCH
/// roots): a worker killed mid-compile cannot clean up after itself.
void remove_tmpdir(Worker& worker) {
  if (worker.tmpdir.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(worker.tmpdir, ignored);
  worker.tmpdir.clear();
}

/// A warning's kind: its words, with each that names one instance of it (a path or URL, a key, a mode,
/// a count: any word with a '/' or a digit) blanked. The same refusal of another shard directory or
/// entry is the same kind.
std::string warning_kind(std::string_view line) {
  std::string kind;
  while (!line.empty()) {
    const std::size_t end = std::min(line.find(' '), line.size());
    const std::string_view word = line.substr(0, end);
    const bool instance = word.find('/') != std::string_view::npos || std::any_of(word.begin(), word.end(), [](char c) {
                            return std::isdigit(static_cast<unsigned char>(c)) != 0;
                          });
    kind.append(instance ? std::string_view("*") : word).push_back(' ');
    line.remove_prefix(std::min(end + 1, line.size()));
  }
  return kind;
}

/// Relays what the workers write to stderr to this process's stderr, a whole line at a time (lines of
/// two workers never mix). A warning another worker has already given is not repeated: each worker is
/// a process of its own and says each of its once-per-process warnings ("... further refusals are
/// logged at info level") once, so -j 8 would say it eight times where -j 1 says it once. A worker's
/// own repeats of a kind (a warning for each of several entries) are relayed, as that process said them.
class StderrRelay {
 public:
  /// Bytes read from `worker`'s stderr.
  void take(Worker& worker, std::string_view bytes) {
    worker.error_buffer.append(bytes);
    std::size_t start = 0;
    for (std::size_t newline; (newline = worker.error_buffer.find('\n', start)) != std::string::npos;) {
      relay(worker.pid, std::string_view(worker.error_buffer).substr(start, newline - start));
      start = newline + 1;
    }
    worker.error_buffer.erase(0, start);
  }
  /// `worker`'s stderr has ended: what is left is its last line, without a newline.
  void finish(Worker& worker) {
    if (!worker.error_buffer.empty()) relay(worker.pid, worker.error_buffer);
    worker.error_buffer.clear();
  }

 private:
  void relay(pid_t from, std::string_view line) {
    constexpr std::string_view kWarning = "kiln: warning: ";
    if (line.starts_with(kWarning)) {
      const auto [first, inserted] = m_warned.try_emplace(warning_kind(line.substr(kWarning.size())), from);
      if (!inserted && first->second != from) return;
    }
    std::string out(line);
    out += '\n';
    (void)std::fwrite(out.data(), 1, out.size(), stderr);
  }
  std::map<std::string, pid_t> m_warned;  ///< warning kind -> the worker that gave it first
};

/// Relays what `worker`'s stderr holds now, without waiting for more (the process may live on a moment
/// after its answer pipe closed, with nothing left to say that this command waits for), then closes it.
void drain_and_close(Worker& worker, StderrRelay& relay) {
  if (worker.errors < 0) return;
  (void)::fcntl(worker.errors, F_SETFL, ::fcntl(worker.errors, F_GETFL) | O_NONBLOCK);
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::read(worker.errors, chunk, sizeof chunk);
    if (n > 0) {
      relay.take(worker, std::string_view(chunk, static_cast<std::size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // the end, nothing more now (EAGAIN), or an error
  }
  relay.finish(worker);
  ::close(worker.errors);
  worker.errors = -1;
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return "stopped";
}

std::optional<Worker> spawn_worker(std::string& error) {
  int pipes[3][2];  // the worker's stdin, stdout (answers) and stderr
  for (int made = 0; made < 3; ++made) {
    if (::pipe2(pipes[made], O_CLOEXEC) != 0) {
      error = fmt::format("pipe failed: {}", std::strerror(errno));
      for (int k = 0; k < made; ++k) {
        ::close(pipes[k][0]);
        ::close(pipes[k][1]);
      }
      return std::nullopt;
    }
  }
  char arg0[] = "kiln";
  char arg1[] = "prewarm";
  char arg2[] = "--worker";
  char* const argv[] = {arg0, arg1, arg2, nullptr};
  // The worker's own TMPDIR, under this process's: what its compilers write there goes with it (below).
  const char* const tmp = std::getenv("TMPDIR");
  std::string tmpdir = fmt::format("{}/kiln-worker-{}-XXXXXX", tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp",
                                   static_cast<long>(::getpid()));
  std::vector<std::string> environment;
  std::vector<char*> envp;
  if (::mkdtemp(tmpdir.data()) != nullptr) {
    for (char** e = environ; *e != nullptr; ++e) {
      if (!std::string_view(*e).starts_with("TMPDIR=")) environment.emplace_back(*e);
    }
    environment.push_back("TMPDIR=" + tmpdir);
    for (std::string& e : environment) envp.push_back(e.data());
  } else {
    tmpdir.clear();  // the worker keeps this process's TMPDIR
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    error = fmt::format("fork failed: {}", std::strerror(errno));
    for (auto& pipe : pipes) {
      ::close(pipe[0]);
      ::close(pipe[1]);
    }
    if (!tmpdir.empty()) ::rmdir(tmpdir.c_str());
    return std::nullopt;
  }
  if (pid == 0) {
    // Only async-signal-safe calls until exec. The worker dies with this process, however it ends (a
    // kill, a crash): an orphan would finish its compile and write into the cache after the command is
    // gone. The signal is kept across exec; it fires when the thread that forked ends, and workers are
    // started by run_in_workers' caller, which stays until they are done. Checked after it is set: this
    // process may already have ended.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(127);
    if (::dup2(pipes[0][0], STDIN_FILENO) < 0 || ::dup2(pipes[1][1], STDOUT_FILENO) < 0 ||
        ::dup2(pipes[2][1], STDERR_FILENO) < 0) {
      ::_exit(127);
    }
    ::execve("/proc/self/exe", argv, envp.data());
    ::_exit(127);
  }
  ::close(pipes[0][0]);
  ::close(pipes[1][1]);
  ::close(pipes[2][1]);
  Worker worker;
  worker.pid = pid;
  worker.to_child = pipes[0][1];
  worker.from_child = pipes[1][0];
  worker.errors = pipes[2][0];
  worker.tmpdir = std::move(tmpdir);
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

}  // namespace

JobResult execute(Engine& engine, const Job& job) {
  JobResult result;
  try {
    const Source source = job.source ? *job.source : make_source(job.request);
    const Options options(job.request.options);
    // A planned request (every one that could be made) is not settled again: the plan's key is taken as its
    // manifest records it, and one the plan could not key is resolved at once (Engine::prewarm with a plan).
    const PrewarmResult prewarmed = job.planned ? engine.prewarm(source, options, job.request.name_expressions,
                                                                 job.request.target, job.plain_kernels, *job.planned)
                                                : engine.prewarm(source, options, job.request.name_expressions,
                                                                 job.request.target, job.plain_kernels);
    result.key = prewarmed.key.hex();
    result.seconds = prewarmed.seconds;
    result.wait_seconds = prewarmed.wait_seconds;
    result.bytes = prewarmed.binary_bytes;
    if (prewarmed.origin == Origin::compiled && !prewarmed.stored) {
      result.status = Status::failed;
      const CacheState store = engine.cache_state();
      // The store's own reason first (a refused shard directory, a full disk, ...); the cache's mode alone
      // says "read_write" for a shard it refuses.
      const std::string& why = store.last_put_error;
      result.error = why.empty() ? fmt::format("compiled, but the cache did not store it (cache {} is {}{}{})",
                                               store.root.string(), cache::to_string(store.mode),
                                               store.mode_reason.empty() ? "" : ": ", store.mode_reason)
                                 : fmt::format("compiled, but the cache did not store it: {}", why);
    } else {
      result.status = prewarmed.origin == Origin::compiled ? Status::compiled : Status::cached;
    }
  } catch (const CompileError& error) {
    // The message is a summary line (with the first error) and then the compiler's log (as the compiler
    // names the source): the summary is the reason, the rest is the log, so each is shown once.
    result.status = Status::failed;
    const std::string_view message = error.what();
    const std::size_t newline = message.find('\n');
    result.error = one_line(message.substr(0, newline));
    result.log = newline == std::string_view::npos ? error.log() : std::string(message.substr(newline + 1));
  } catch (const ConfigError& error) {
    result.status = Status::failed;
    result.error = one_line(error.what());
    result.bad_input = true;
  } catch (const std::exception& error) {
    result.status = Status::failed;
    result.error = one_line(error.what());
  }
  return result;
}

void run_on_threads(Engine& engine, const std::vector<Job>& jobs, const std::vector<std::size_t>& indices,
                    unsigned threads, std::vector<JobResult>& results, const JobDone& done) {
  parallel_for(indices.size(), std::max(1U, threads), [&](std::size_t k) {
    const std::size_t index = indices[k];
    results[index] = execute(engine, jobs[index]);
    done(index, results[index]);
  });
}

Unstarted run_in_workers(const std::vector<Job>& jobs, const std::vector<std::size_t>& indices, unsigned count,
                         std::vector<JobResult>& results, const JobDone& done) {
  // A worker that dies must not take this process with it when we write to its pipe.
  struct sigaction ignore {};
  struct sigaction previous {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);

  std::deque<std::size_t> pending(indices.begin(), indices.end());
  std::vector<Worker> workers;
  StderrRelay relay;
  // Leaving by an exception (a failed poll, no memory): every worker still here is killed and waited
  // for, so that none goes on compiling and writing into the cache after the command. The normal end
  // below lets each one finish instead, and hands none to this.
  struct KillOnUnwind {
    std::vector<Worker>& workers;
    const struct sigaction& previous;
    ~KillOnUnwind() {
      for (Worker& worker : workers) {
        if (worker.pid <= 0) continue;
        ::kill(worker.pid, SIGKILL);
        int status = 0;
        while (::waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
        }
        for (const int fd : {worker.to_child, worker.from_child, worker.errors}) {
          if (fd >= 0) ::close(fd);
        }
        remove_tmpdir(worker);
      }
      ::sigaction(SIGPIPE, &previous, nullptr);
    }
  } kill_on_unwind{workers, previous};
  std::size_t spawns_left = count + indices.size();  // a replacement per request at most
  std::string spawn_error;
  const auto finish_job = [&](std::size_t index, JobResult result) {
    results[index] = std::move(result);
    done(index, results[index]);
  };
  const auto fill = [&] {
    const auto busy = static_cast<std::size_t>(
        std::count_if(workers.begin(), workers.end(), [](const Worker& worker) { return worker.job.has_value(); }));
    while (workers.size() < std::min<std::size_t>(count, pending.size() + busy) && spawns_left > 0) {
      --spawns_left;
      auto worker = spawn_worker(spawn_error);
      if (!worker) break;
      spawn_error.clear();  // the reason is the last attempt's only
      workers.push_back(std::move(*worker));
    }
  };
  const auto reap = [&](Worker& worker) -> std::string {
    if (worker.to_child >= 0) ::close(worker.to_child);
    ::close(worker.from_child);
    int status = 0;
    while (::waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
    }
    drain_and_close(worker, relay);  // its last words (an abort's message) are in the pipe by now
    remove_tmpdir(worker);
    return describe_exit(status);
  };
  // Reads what a worker wrote to stderr and relays its whole lines; at its end, the rest.
  const auto read_errors = [&](Worker& worker) {
    char chunk[4096];
    const ssize_t n = ::read(worker.errors, chunk, sizeof chunk);
    if (n > 0) {
      relay.take(worker, std::string_view(chunk, static_cast<std::size_t>(n)));
    } else if (n == 0 || errno != EINTR) {
      relay.finish(worker);
      ::close(worker.errors);
      worker.errors = -1;
    }
  };

  Unstarted unstarted;
  std::size_t outstanding = indices.size();
  fill();
  while (outstanding > 0) {
    if (workers.empty() && !spawn_error.empty()) {
      // None running and the system refused the last one: what is left goes back to the caller, with the reason.
      unstarted.indices.assign(pending.begin(), pending.end());
      unstarted.why = spawn_error;
      break;
    }
    if (workers.empty()) {
      // Every replacement was used up by workers that died: those requests would likely take this process
      // down too, so they fail here rather than run in it.
      while (!pending.empty()) {
        finish_job(pending.front(), failed_result("no worker process left to run it (every replacement died)"));
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
      const json plain = jobs[index].plain_kernels;
      (void)write_all(worker.to_child,
                      fmt::format("{}\t{}\t{}\t{}\n", index, plain.dump(), plan_json(jobs[index].planned).dump(),
                                  detail::request_log_line(jobs[index].request)));
    }
    // Each worker's answers, then each one's stderr (a closed one is -1: poll skips it).
    std::vector<pollfd> fds;
    for (const Worker& worker : workers) fds.push_back({worker.from_child, POLLIN, 0});
    for (const Worker& worker : workers) fds.push_back({worker.errors, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("poll failed: {}", std::strerror(errno)));
    }
    for (std::size_t w = 0; w < workers.size(); ++w) {
      if (fds[workers.size() + w].revents != 0 && workers[w].errors >= 0) read_errors(workers[w]);
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
                  failed_result(fmt::format("worker sent a malformed answer: {}", error.what())));
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
            failed_result(fmt::format("worker process died while compiling: {}", how)));
        --outstanding;
      }
      worker.pid = -1;
    }
    std::erase_if(workers, [](const Worker& worker) { return worker.pid < 0; });
    fill();
  }
  // Tell every worker at once that there is no more work (EOF on its stdin). Each then persists its
  // statistics and closes its answer pipe before it exits; waiting for that EOF (not for the exit)
  // means everything it did is on disk, while the kernel's teardown of its address space
  // (bench/RESULTS.md, section 11) does not delay this command. Its stderr is relayed meanwhile (a
  // worker blocked on a full stderr pipe would never get there), and what it holds at that EOF after.
  // Workers that have exited by then are reaped; the rest finish their exit on their own, doing
  // nothing more, and die with this process if it ends first (PR_SET_PDEATHSIG, spawn_worker).
  for (Worker& worker : workers) {
    ::close(worker.to_child);
    worker.to_child = -1;
  }
  for (;;) {
    std::vector<pollfd> fds;
    for (const Worker& worker : workers) fds.push_back({worker.from_child, POLLIN, 0});
    for (const Worker& worker : workers) fds.push_back({worker.errors, POLLIN, 0});
    if (std::none_of(workers.begin(), workers.end(), [](const Worker& worker) { return worker.from_child >= 0; })) {
      break;
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("poll failed: {}", std::strerror(errno)));
    }
    for (std::size_t w = 0; w < workers.size(); ++w) {
      Worker& worker = workers[w];
      if (fds[workers.size() + w].revents != 0 && worker.errors >= 0) read_errors(worker);
      if (fds[w].revents == 0 || worker.from_child < 0) continue;
      char chunk[4096];
      const ssize_t n = ::read(worker.from_child, chunk, sizeof chunk);
      if (n == 0 || (n < 0 && errno != EINTR)) {
        ::close(worker.from_child);
        worker.from_child = -1;
      }
    }
  }
  for (Worker& worker : workers) {
    drain_and_close(worker, relay);
    int status = 0;
    (void)::waitpid(worker.pid, &status, WNOHANG);
    remove_tmpdir(worker);  // its answers are all in: it only exits now
  }
  workers.clear();  // each has finished: nothing for KillOnUnwind (which restores SIGPIPE's handler)
  return unstarted;
}

void exit_without_teardown(Engine& engine, int code, std::FILE* close_file) {
  // What the engine's destructor would do for the cache, bounded in time: the remote tiers' background
  // publishes written, the fleet compile leases released, the tiers' counters recorded, then the
  // engine's counters. Before a worker closes its answer pipe (the parent's signal that all is done).
  engine.prepare_exit();
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  if (close_file != nullptr) std::fclose(close_file);
  ::_exit(code);
}

// Library output that would go to stdout is sent to stderr instead: stdout is the answer pipe.
int run_worker() {
  // stderr is a pipe the parent reads only until this process closes its answer pipe (StderrRelay): a
  // line written after that must not end the process by SIGPIPE.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, nullptr);
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
    std::size_t tabs[3];
    for (std::size_t t = 0, from = 0; t < 3; ++t) {
      tabs[t] = line.find('\t', from);
      if (tabs[t] == std::string::npos) return kExitError;
      from = tabs[t] + 1;
    }
    const auto index = static_cast<std::size_t>(std::stoull(line.substr(0, tabs[0])));
    JobResult result;
    try {
      Job job;
      job.plain_kernels = json::parse(line.substr(tabs[0] + 1, tabs[1] - tabs[0] - 1)).get<std::vector<std::string>>();
      job.planned = plan_from_json(json::parse(line.substr(tabs[1] + 1, tabs[2] - tabs[1] - 1)));
      job.request = detail::parse_request_log_line(std::string_view(line).substr(tabs[2] + 1));
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

}  // namespace kiln::cli::prewarm
