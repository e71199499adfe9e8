#pragma once
// What the benchmarks that measure fresh processes share: the clock, quantiles, the CUDA driver opened
// by hand (so each side pays its own first calls), and running this same program again as a child.
#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::bench {

using Clock = std::chrono::steady_clock;

inline double ns_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}
inline double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}
inline double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

/// libcuda opened by hand; a missing symbol ends the process (a benchmark child).
struct Driver {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  template <typename F>
  F get(const char* name) {
    void* p = lib != nullptr ? dlsym(lib, name) : nullptr;
    if (p == nullptr) {
      fmt::print(stderr, "missing {}\n", name);
      std::exit(2);
    }
    return reinterpret_cast<F>(p);
  }
};

/// Runs this program again (/proc/self/exe) with `args` (argv[1]...) and the extra environment
/// `env`, and returns its stdout; nullopt (after printing why) when it did not exit 0.
inline std::optional<std::string> run_self(const std::vector<std::string>& args,
                                           const std::vector<std::pair<std::string, std::string>>& env = {}) {
  int fds[2];
  if (pipe(fds) != 0) return std::nullopt;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv{const_cast<char*>("bench-child")};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t r; (r = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(r));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fmt::print("child {} failed (status {}): {}\n", args.empty() ? std::string() : args.back(), status, out);
    return std::nullopt;
  }
  return out;
}

}  // namespace kiln::bench
