#pragma once
// Helpers shared by the cache tests: file bytes and times, the files under a cache root, and running a
// check in a child process (optionally as the unprivileged user `nobody`, since these tests often run
// as root, for whom file permissions do not apply). Temp directories, synthetic entries and stderr
// capture come from the test support library (tests/support/).
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache/entry.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/store.hpp"
#include "stderr_capture.hpp"
#include "synthetic_entry.hpp"
#include "temp_dir.hpp"

namespace kiln_test {

namespace fs = std::filesystem;
using kiln::cache::CanonicalKey;
using kiln::cache::Entry;
using kiln::cache::Hash128;
using kiln::cache::LookupOutcome;
using kiln::cache::Store;
using kiln::cache::StoreConfig;
using kiln::cache::StoreMode;
using kiln::test::count_occurrences;
using kiln::test::make_entry;
using kiln::test::StderrCapture;
using kiln::test::TempDir;

inline std::vector<std::byte> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  if (!chars.empty()) std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

inline void write_bytes(const fs::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// Sets a file's mtime `age` into the past.
inline void backdate(const fs::path& path, std::chrono::seconds age) {
  const auto when = std::chrono::system_clock::now() - age;
  const auto since_epoch = when.time_since_epoch();
  struct timespec times[2];
  times[0].tv_sec = times[1].tv_sec =
      static_cast<time_t>(std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count());
  times[0].tv_nsec = times[1].tv_nsec = 0;
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW) == 0);
}

/// Every temp file (".*.tmp.*") under a cache root.
inline std::vector<fs::path> temp_files(const fs::path& root) {
  std::vector<fs::path> found;
  std::error_code ignored;
  for (auto it = fs::recursive_directory_iterator(root, ignored); it != fs::recursive_directory_iterator();
       it.increment(ignored)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(".") && name.find(".tmp.") != std::string::npos) found.push_back(it->path());
  }
  return found;
}

inline kiln::cache::StoreConfig store_config(const fs::path& root) {
  kiln::cache::StoreConfig config;
  config.root = root;
  return config;
}

/// Every entry file ("*.kiln") under a cache root, found without a Store (which may refuse the root).
inline std::vector<fs::path> entry_files(const fs::path& root) {
  std::vector<fs::path> found;
  std::error_code ignored;
  for (auto it = fs::recursive_directory_iterator(root, ignored); it != fs::recursive_directory_iterator();
       it.increment(ignored)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(".") && name.ends_with(".kiln")) found.push_back(it->path());
  }
  return found;
}

/// The uid/gid of `nobody` (Debian: 65534).
inline std::pair<uid_t, gid_t> nobody_ids() {
  const struct passwd* entry = ::getpwnam("nobody");
  if (entry == nullptr) return {65534, 65534};
  return {entry->pw_uid, entry->pw_gid};
}

struct ChildResult {
  std::string failure;  ///< empty when the child's body returned ""
  std::string stderr_text;
};

enum class RunAs : std::uint8_t { current_user, unprivileged };

/// Runs `body` in a forked child. `body` returns "" on success or what went wrong. With
/// RunAs::unprivileged the child first drops to `nobody` when the test runs as root (for permission
/// checks, which root bypasses). The child's stderr is captured.
inline ChildResult run_in_child(const std::function<std::string()>& body, RunAs as = RunAs::current_user) {
  int result_pipe[2];
  int error_pipe[2];
  REQUIRE(::pipe(result_pipe) == 0);
  REQUIRE(::pipe(error_pipe) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(result_pipe[0]);
    ::close(error_pipe[0]);
    ::dup2(error_pipe[1], 2);
    std::string failure;
    if (as == RunAs::unprivileged && ::geteuid() == 0) {
      const auto [uid, gid] = nobody_ids();
      if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) {
        failure = std::string("cannot drop to nobody: ") + std::strerror(errno);
      }
    }
    if (failure.empty()) {
      try {
        failure = body();
      } catch (const std::exception& error) {
        failure = std::string("exception: ") + error.what();
      }
    }
    std::fflush(stderr);
    (void)!::write(result_pipe[1], failure.data(), failure.size());
    ::_exit(0);
  }
  REQUIRE(pid > 0);
  ::close(result_pipe[1]);
  ::close(error_pipe[1]);
  ChildResult result;
  auto drain = [](int fd) {
    std::string text;
    char buffer[4096];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof(buffer))) > 0;) text.append(buffer, static_cast<std::size_t>(n));
    ::close(fd);
    return text;
  };
  result.stderr_text = drain(error_pipe[0]);
  result.failure = drain(result_pipe[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) result.failure += " (child did not exit cleanly)";
  return result;
}

struct ProcessResult {
  int exit_code = -1;  ///< -1 when it did not exit normally (e.g. killed)
  std::string out;
  std::string err;
};

/// Runs a program and waits for it. `before_exec` runs in the child before exec (drop privileges, set
/// resource limits); `env` entries ("NAME=value") are added to the child's environment.
inline ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                                 const std::function<void()>& before_exec = {}) {
  int out_pipe[2];
  int err_pipe[2];
  REQUIRE(::pipe(out_pipe) == 0);
  REQUIRE(::pipe(err_pipe) == 0);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    for (const std::string& entry : env) ::putenv(const_cast<char*>(entry.c_str()));
    if (before_exec) before_exec();
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ProcessResult result;
  struct pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_pipes = 2;
  while (open_pipes > 0) {
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<std::size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
      }
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

/// Drops to `nobody` when running as root (call in a child only).
inline void become_unprivileged() {
  if (::geteuid() != 0) return;
  const auto [uid, gid] = nobody_ids();
  if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) ::_exit(126);
}

}  // namespace kiln_test
