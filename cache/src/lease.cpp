#include "kiln/cache/lease.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <random>
#include <thread>

#include "kiln/base/log.hpp"
#include "posix_util.hpp"

namespace kiln::cache {
namespace {

using Clock = std::chrono::system_clock;
using detail::UniqueFd;

constexpr auto kLeasePoll = std::chrono::milliseconds(10);
/// A lease file without a readable "pid host" is broken after this: long enough for its writer to
/// finish writing it, short enough that a writer that died mid-write blocks the key only briefly.
constexpr auto kUnreadableLeaseGrace = std::chrono::seconds(5);

/// This host's name as a lease records it (spaces replaced, so the file stays space-separated).
const std::string& this_host() {
  static const std::string host = [] {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) != 0) return std::string("unknown-host");
    std::string text(name);
    std::replace(text.begin(), text.end(), ' ', '_');
    return text.empty() ? std::string("unknown-host") : text;
  }();
  return host;
}

}  // namespace

CompileLease::CompileLease(CompileLease&& other) noexcept
    : m_path(std::move(other.m_path)), m_token(std::move(other.m_token)) {
  other.m_path.clear();
}

CompileLease& CompileLease::operator=(CompileLease&& other) noexcept {
  if (this != &other) {
    release();
    m_path = std::move(other.m_path);
    m_token = std::move(other.m_token);
    other.m_path.clear();
  }
  return *this;
}

CompileLease::~CompileLease() { release(); }

void CompileLease::release() noexcept {
  if (m_path.empty()) return;
  try {
    // Remove the file only while it is still ours: a waiter may have judged it stale and replaced it.
    const UniqueFd fd(::open(m_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (fd && detail::read_small(fd.get(), 512) == m_token) ::unlink(m_path.c_str());
  } catch (...) {
    // Out of memory: leave the lease; it goes stale and is broken by the next waiter.
  }
  m_path.clear();
}

CompileLease acquire_compile_lease(const std::string& lock_dir, const Hash128& key, const std::string& entry_path,
                                   std::chrono::milliseconds max_wait) noexcept {
  CompileLease lease;
  try {
    const std::string lease_path = fmt::format("{}/{}.lease", lock_dir, key.hex());
    const auto deadline = std::chrono::steady_clock::now() + max_wait;
    thread_local std::mt19937_64 nonce_source{std::random_device{}()};
    auto entry_exists = [&entry_path] { return ::access(entry_path.c_str(), F_OK) == 0; };
    for (;;) {
      if (entry_exists()) return lease;
      const std::string token = fmt::format(
          "{} {} {} {:016x}\n", ::getpid(), this_host(),
          std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count(), nonce_source());
      const int fd = ::open(lease_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (fd >= 0) {
        const bool written = ::write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
        ::close(fd);
        lease.m_path = lease_path;
        lease.m_token = token;
        // The owner may have published between our check and our create: nothing left to compile.
        if (!written || entry_exists()) lease.release();
        return lease;
      }
      if (errno == ENOENT && detail::make_private_dir(lock_dir) == 0) continue;
      if (errno != EEXIST) return lease;  // cannot take leases here: compile without one

      // Someone holds it: judge whether they are still working.
      bool stale = false;
      {
        const UniqueFd holder(::open(lease_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
        struct stat st {};
        if (!holder) {
          if (errno == ENOENT) continue;  // released just now
          return lease;
        }
        if (::fstat(holder.get(), &st) != 0) return lease;
        const std::string text = detail::read_small(holder.get(), 512);
        const auto age = Clock::now() - detail::to_time_point(st.st_mtim);
        long pid = -1;
        std::string host;
        if (const std::size_t space = text.find(' '); space != std::string::npos && text.ends_with('\n')) {
          std::from_chars(text.data(), text.data() + space, pid);
          const std::size_t host_end = text.find(' ', space + 1);
          if (host_end != std::string::npos) host = text.substr(space + 1, host_end - space - 1);
        }
        if (pid <= 0 || host.empty()) {
          stale = age > kUnreadableLeaseGrace;  // still being written, or its writer died mid-write
        } else {
          stale = age > kLeaseStaleAge || (host == this_host() && !detail::process_alive(pid));
        }
        if (stale) {
          // Break it only if it is still the file we judged (not a new owner's fresh lease).
          struct stat now {};
          if (::lstat(lease_path.c_str(), &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) {
            continue;  // already broken or replaced: look again
          }
          KILN_LOG(debug, "disk cache: breaking stale compile lease {} ({})", lease_path,
                   text.empty() ? "empty" : std::string_view(text).substr(0, text.size() - 1));
          if (::unlink(lease_path.c_str()) == 0 || errno == ENOENT) continue;
          // Cannot remove it: wait like for a live owner (bounded by max_wait).
        }
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return lease;
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(kLeasePoll, deadline - now));
    }
  } catch (...) {
    return CompileLease{};
  }
}

}  // namespace kiln::cache
