#pragma once
// Private to cache/: small POSIX helpers shared by the store (store.cpp), the lifetime counters (stats.cpp,
// remote/tier_stats.cpp), the compile lease (lease.cpp) and the dependency manifests
// (includes/manifest_store.cpp, includes/manifest_read.cpp).
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

namespace kiln::cache::detail {

/// Closes a file descriptor on scope exit.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) noexcept : m_fd(fd) {}
  ~UniqueFd() {
    if (m_fd >= 0) ::close(m_fd);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      if (m_fd >= 0) ::close(m_fd);
      m_fd = std::exchange(other.m_fd, -1);
    }
    return *this;
  }
  [[nodiscard]] int get() const noexcept { return m_fd; }
  explicit operator bool() const noexcept { return m_fd >= 0; }

 private:
  int m_fd;
};

/// A file time (CLOCK_REALTIME) as a system_clock time point.
[[nodiscard]] std::chrono::system_clock::time_point to_time_point(const struct timespec& ts) noexcept;

/// mkdir with mode 0700; an existing directory is success. Returns 0 or the errno.
int make_private_dir(const std::string& path) noexcept;

/// Whether a process with this pid exists on this host (one we may not signal counts as alive).
[[nodiscard]] bool process_alive(long pid) noexcept;

/// How a read of an exact byte count ended.
enum class ReadStatus : std::uint8_t { ok, short_read, io_error };

/// Reads exactly `count` bytes (retrying EINTR and partial reads); `error` gets the errno on io_error.
/// Inline: the entry reader calls it on the request path.
inline ReadStatus read_exact(int fd, std::byte* out, std::size_t count, int& error) noexcept {
  while (count > 0) {
    const ssize_t n = ::read(fd, out, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
      return ReadStatus::io_error;
    }
    if (n == 0) return ReadStatus::short_read;
    out += n;
    count -= static_cast<std::size_t>(n);
  }
  return ReadStatus::ok;
}

/// Reads a small text file (lease, size file) from an open descriptor: at most `max_bytes`, from the start.
[[nodiscard]] std::string read_small(int fd, std::size_t max_bytes);

/// The lifetime-counter files under <root>/stats/ (stats.cpp's shards, remote/tier_stats.cpp's tiers), each
/// changed by many processes: `update` gets the file's text (empty when new) under an exclusive flock and
/// returns the new text, written in place. Creates the file (0600) but not its folder. False when it could
/// not be opened, locked or written; throws what `update` throws.
bool update_locked_text(const std::string& path, const std::function<std::string(const std::string&)>& update);
/// The text of such a file read under a shared flock (at most 64 KiB); nullopt when it cannot be opened.
[[nodiscard]] std::optional<std::string> read_locked_text(const std::string& path);

}  // namespace kiln::cache::detail
