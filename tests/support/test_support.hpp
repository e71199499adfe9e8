#pragma once
// Small helpers shared by tests: a temporary directory removed at scope exit (temp_dir.hpp), a scoped
// environment variable, a live child process, a skip reporter (exit code 77 = skipped for ctest), and
// whether `nobody` can run a program of the build tree.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "temp_dir.hpp"

namespace kiln::test {

/// Tests that run as root run some programs of the build tree as `nobody`: that needs every folder above
/// the program to let others in, and a clone under `mktemp -d` (a folder of mode 700) does not. Returns the
/// first folder (or the program itself) that keeps others out, or nullopt when `nobody` can run it; such a
/// test says so and leaves that part out rather than fail on an exec it cannot make.
inline std::optional<std::string> closed_to_others(const std::filesystem::path& program) {
  std::error_code ec;
  const std::filesystem::path full = std::filesystem::canonical(program, ec);
  if (ec) return program.string();
  for (std::filesystem::path at = full;; at = at.parent_path()) {
    struct stat st {};
    if (::stat(at.c_str(), &st) != 0 || (st.st_mode & S_IXOTH) == 0) return at.string();
    if (at == at.root_path()) return std::nullopt;
  }
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (m_old) ::setenv(m_name.c_str(), m_old->c_str(), 1);
    else ::unsetenv(m_name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string m_name;
  std::optional<std::string> m_old;
};

/// A child process that lives (paused) until this object is destroyed: a pid that is alive and does
/// nothing, e.g. the holder of a planted compile lease that is never refreshed.
class LiveChild {
 public:
  LiveChild() : m_pid(::fork()) {
    if (m_pid == 0) {
      ::pause();
      ::_exit(0);
    }
    if (m_pid < 0) std::abort();
  }
  ~LiveChild() {
    ::kill(m_pid, SIGKILL);
    ::waitpid(m_pid, nullptr, 0);
  }
  LiveChild(const LiveChild&) = delete;
  LiveChild& operator=(const LiveChild&) = delete;
  [[nodiscard]] pid_t pid() const { return m_pid; }

  /// A lease file's text in the old four-field form ("pid host time nonce"), which is judged by its pid
  /// alone: held by this live child on this host, it can only be broken for its age.
  [[nodiscard]] std::string lease_text() const {
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) != 0) std::abort();
    return std::to_string(m_pid) + " " + host + " 1700000000 00\n";
  }

 private:
  pid_t m_pid;
};

/// Prints the reason and exits with ctest's skip code.
[[noreturn]] inline void skip(const std::string& reason) {
  std::printf("SKIPPED: %s\n", reason.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

/// Runs `command` with /bin/sh (popen) and returns what it printed on stdout (add " 2>&1" for stderr
/// too); `status` (if given) gets pclose()'s status, -1 when it could not be started.
inline std::string shell_output(const std::string& command, int* status = nullptr) {
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    if (status != nullptr) *status = -1;
    return output;
  }
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int closed = ::pclose(pipe);
  if (status != nullptr) *status = closed;
  return output;
}

}  // namespace kiln::test
