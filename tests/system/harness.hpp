#pragma once
// Drives the `kiln` binary as a user would: a process per command, its exit code, stdout and stderr,
// with environment overrides (KILN_CACHE_DIR, KILN_CACHE_PACKS, ...). Each test works in its own
// temp directory, removed at the end.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "temp_dir.hpp"

extern char** environ;

namespace kiln::system_test {

namespace fs = std::filesystem;
using nlohmann::json;

struct Result {
  int rc = -1;
  std::string out;
  std::string err;
  [[nodiscard]] json parsed() const { return json::parse(out); }
  /// For failure messages.
  [[nodiscard]] std::string describe() const {
    return "rc=" + std::to_string(rc) + "\n--- stdout:\n" + out + "\n--- stderr:\n" + err;
  }
};

inline std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// A fresh directory under the system temp dir, removed on destruction (the test support library's).
using kiln::test::TempDir;

/// Starts `program args...` with `env` overriding (or, with an empty value, removing) variables;
/// stdout and stderr go to files in `scratch`. Returns the pid; finish() waits for it.
inline pid_t start_program(const std::string& program, const std::vector<std::string>& args,
                           const std::map<std::string, std::string>& env, const fs::path& scratch) {
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (env.count(name) == 0) environment.push_back(entry);
  }
  for (const auto& [name, value] : env) {
    if (!value.empty()) environment.push_back(name + "=" + value);
  }
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_storage{program};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  const fs::path out_path = scratch / ".stdout";
  const fs::path err_path = scratch / ".stderr";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) throw std::runtime_error("cannot start " + program);
  return pid;
}

/// Waits for a start_program() child and collects its exit status and output.
inline Result finish(pid_t pid, const fs::path& scratch) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  Result result;
  result.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = read_all(scratch / ".stdout");
  result.err = read_all(scratch / ".stderr");
  return result;
}

/// Waits for a start_program() child for at most `timeout_s` seconds, calling `tick()` about every 5 ms
/// while it runs (to watch its children). Returns std::nullopt, after killing it, when it did not
/// finish in time: a hang is a test failure, not a hung test.
template <typename Tick>
std::optional<Result> finish_within(pid_t pid, const fs::path& scratch, double timeout_s, Tick&& tick) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      Result result;
      result.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      result.out = read_all(scratch / ".stdout");
      result.err = read_all(scratch / ".stderr");
      return result;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0) {
      }
      return std::nullopt;
    }
    tick();
    ::usleep(5000);
  }
}

/// Runs `program args...` to completion (see start_program).
inline Result run_program(const std::string& program, const std::vector<std::string>& args,
                          const std::map<std::string, std::string>& env, const fs::path& scratch) {
  return finish(start_program(program, args, env, scratch), scratch);
}

/// The pids of the live children of `parent` (from /proc/<pid>/stat).
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> children;
  std::error_code ec;
  for (const auto& dir : fs::directory_iterator("/proc", ec)) {
    const std::string name = dir.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_all(dir.path() / "stat");
    const std::size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid == parent && state != 'Z') children.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return children;
}

/// The kiln binary under test (KILN_CLI_PATH from the build).
inline Result run_kiln(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                       const fs::path& scratch) {
  return run_program(KILN_CLI_PATH, args, env, scratch);
}

/// Number of '\n'-terminated lines.
inline std::size_t count_lines(const std::string& text) {
  std::size_t lines = 0;
  for (const char c : text) lines += c == '\n' ? 1 : 0;
  return lines;
}

/// The "key" of every item of a JSON array (`kiln cache ls --json`, prewarm's per-request results), sorted.
inline std::vector<std::string> sorted_keys(const json& items) {
  std::vector<std::string> keys;
  for (const json& item : items) keys.push_back(item.at("key").get<std::string>());
  std::sort(keys.begin(), keys.end());
  return keys;
}

/// Slow to compile on purpose (about 2 s with NVRTC 13 on a loaded CI core): the front end folds
/// twelve long constexpr loops, each under NVRTC's constexpr step limit.
inline constexpr const char* kSlow =
    "//! kiln-kernels: slow\n"
    "#include <kiln/rtc.h>\n"
    "constexpr unsigned spin(unsigned n, unsigned seed) {\n"
    "  unsigned s = seed;\n"
    "  for (unsigned i = 0; i < n; ++i) s = s * 1664525u + 1013904223u + i;\n"
    "  return s;\n"
    "}\n"
    "KILN_KERNEL void slow(unsigned* out) {\n"
    "  constexpr unsigned a = spin(400000, 1), b = spin(400000, 2), c = spin(400000, 3), d = spin(400000, 4);\n"
    "  constexpr unsigned e = spin(400000, 5), f = spin(400000, 6), g = spin(400000, 7), h = spin(400000, 8);\n"
    "  constexpr unsigned i = spin(400000, 9), j = spin(400000, 10), k = spin(400000, 11), l = spin(400000, 12);\n"
    "  out[threadIdx.x] = a ^ b ^ c ^ d ^ e ^ f ^ g ^ h ^ i ^ j ^ k ^ l + SLOW_VARIANT;\n"
    "}\n";

}  // namespace kiln::system_test
