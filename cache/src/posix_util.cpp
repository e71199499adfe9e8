#include "posix_util.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <cerrno>

namespace kiln::cache::detail {

std::chrono::system_clock::time_point to_time_point(const struct timespec& ts) noexcept {
  using Clock = std::chrono::system_clock;
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                                       std::chrono::nanoseconds(ts.tv_nsec)));
}

int make_private_dir(const std::string& path) noexcept {
  if (::mkdir(path.c_str(), 0700) == 0) return 0;
  if (errno != EEXIST) return errno;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

bool process_alive(long pid) noexcept {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

std::string read_small(int fd, std::size_t max_bytes) {
  std::string text(max_bytes, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return text;
}

namespace {
constexpr std::size_t kLockedTextMax = 64 * 1024;
}  // namespace

bool update_locked_text(const std::string& path, const std::function<std::string(const std::string&)>& update) {
  const UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd || ::flock(fd.get(), LOCK_EX) != 0) return false;  // the lock goes with the descriptor
  const std::string text = update(read_small(fd.get(), kLockedTextMax));
  if (::pwrite(fd.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) return false;
  return ::ftruncate(fd.get(), static_cast<off_t>(text.size())) == 0;
}

std::optional<std::string> read_locked_text(const std::string& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd || ::flock(fd.get(), LOCK_SH) != 0) return std::nullopt;
  return read_small(fd.get(), kLockedTextMax);
}

}  // namespace kiln::cache::detail
