#include "kiln/cache/lease.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include "kiln/base/log.hpp"
#include "posix_util.hpp"

namespace kiln::cache {
namespace {

using Clock = std::chrono::system_clock;
using detail::UniqueFd;

constexpr auto kLeasePoll = std::chrono::milliseconds(10);
/// A lease file without a readable "pid host" is broken after this: long enough for its writer to
/// finish writing it (create and write are one step apart), short enough that a writer that died
/// between them, or a full disk that took the write, blocks the key only briefly.
constexpr auto kUnreadableLeaseGrace = std::chrono::seconds(2);
/// A waiter says (once) whom it waits for after this long: a wait this long is worth knowing about.
constexpr auto kWaitNotice = std::chrono::seconds(1);

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

/// Reads a small /proc file whole; empty when it cannot be read.
std::string read_proc(const std::string& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  return fd ? detail::read_small(fd.get(), 4096) : std::string();
}

/// The start time of process `pid` in clock ticks since boot (field 22 of /proc/<pid>/stat), as text;
/// empty when it cannot be read. With the boot id it tells a process from a later one given the same
/// pid (pids are reused, and a container restarted under the same hostname starts from the same pids).
std::string start_ticks(long pid) {
  const std::string stat = read_proc(fmt::format("/proc/{}/stat", pid));
  // Field 2, the command name, is in parentheses and may hold spaces or ')': count from the last ')'.
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::size_t at = close + 1;
  for (int field = 3; field <= 22; ++field) {
    at = stat.find_first_not_of(' ', at);
    if (at == std::string::npos) return {};
    const std::size_t end = std::min(stat.find_first_of(" \n", at), stat.size());
    if (field == 22) {
      const std::string ticks = stat.substr(at, end - at);
      return ticks.find_first_not_of("0123456789") == std::string::npos ? ticks : std::string();
    }
    at = end;
  }
  return {};
}

/// This boot's id (/proc/sys/kernel/random/boot_id, one per kernel boot, shared by its containers);
/// empty when it cannot be read.
const std::string& this_boot() {
  static const std::string boot = [] {
    std::string id = read_proc("/proc/sys/kernel/random/boot_id");
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    return id.find_first_of(" \n") == std::string::npos ? id : std::string();
  }();
  return boot;
}

/// A lease file's content: "pid host unix-time nonce start-ticks boot-id\n". Leases written before the
/// last two fields existed hold four; they are judged by pid alone. A field this process could not
/// learn is written as "-" and is not compared.
struct Holder {
  long pid = -1;
  std::string host;
  std::string start;  ///< empty: not recorded
  std::string boot;   ///< empty: not recorded
  [[nodiscard]] bool readable() const { return pid > 0 && !host.empty(); }
};

Holder parse_holder(std::string_view text) {
  Holder holder;
  if (!text.ends_with('\n')) return holder;  // still being written (or its writer died mid-write)
  text.remove_suffix(1);
  std::vector<std::string_view> fields;
  while (!text.empty()) {
    const std::size_t space = text.find(' ');
    fields.push_back(text.substr(0, space));
    if (space == std::string_view::npos) break;
    text.remove_prefix(space + 1);
  }
  if (fields.size() < 2) return holder;
  long pid = -1;
  const auto [end, error] = std::from_chars(fields[0].data(), fields[0].data() + fields[0].size(), pid);
  if (error != std::errc() || end != fields[0].data() + fields[0].size()) return holder;
  holder.pid = pid;
  holder.host = std::string(fields[1]);
  if (fields.size() >= 6) {
    if (fields[4] != "-") holder.start = std::string(fields[4]);
    if (fields[5] != "-") holder.boot = std::string(fields[5]);
  }
  return holder;
}

/// Whether a readable lease of this host's is held by a process that is gone: the pid is dead, or it
/// now names another process (another start time), or the lease is from an earlier boot.
bool holder_gone(const Holder& holder) {
  if (!holder.boot.empty() && !this_boot().empty() && holder.boot != this_boot()) return true;
  if (!detail::process_alive(holder.pid)) return true;
  if (holder.start.empty()) return false;  // an old-format lease: the pid is all there is
  const std::string start = start_ticks(holder.pid);
  return !start.empty() && start != holder.start;
}

/// Refreshes the leases this process holds (their mtime set to now) every kLeaseRefresh, on one thread
/// started with the first lease taken. It never ends (nor blocks an exit: it is detached and its state
/// is never destroyed). A forked child holds none of its parent's leases and starts its own thread
/// when it takes one.
class LeaseKeeper {
 public:
  static LeaseKeeper& instance() {
    static LeaseKeeper* keeper = [] {
      auto* made = new LeaseKeeper();  // never destroyed: the thread may outlive static destruction
      ::pthread_atfork([] { instance().m_mutex.lock(); }, [] { instance().m_mutex.unlock(); },
                       [] {
                         LeaseKeeper& k = instance();
                         k.m_held.clear();
                         k.m_running = false;  // the thread is not in the child
                         k.m_mutex.unlock();
                       });
      return made;
    }();
    return *keeper;
  }

  void hold(const std::string& path) {
    const std::lock_guard lock(m_mutex);
    m_held.push_back(path);
    if (!m_running) {
      std::thread([this] { run(); }).detach();
      m_running = true;
    }
  }

  void drop(const std::string& path) noexcept {
    const std::lock_guard lock(m_mutex);
    const auto it = std::find(m_held.begin(), m_held.end(), path);
    if (it != m_held.end()) m_held.erase(it);
  }

 private:
  LeaseKeeper() = default;

  [[noreturn]] void run() {
    std::unique_lock lock(m_mutex);
    for (;;) {
      m_wake.wait_for(lock, kLeaseRefresh);
      for (const std::string& path : m_held) (void)::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
    }
  }

  std::mutex m_mutex;
  std::condition_variable m_wake;
  std::vector<std::string> m_held;
  bool m_running = false;
};

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
  LeaseKeeper::instance().drop(m_path.string());
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
    const auto started = std::chrono::steady_clock::now();
    const auto deadline = started + max_wait;
    bool noticed = false;
    // Read per call, not cached: a forked child is a new process with its own start time.
    const std::string own_start = start_ticks(::getpid());
    thread_local std::mt19937_64 nonce_source{std::random_device{}()};
    auto entry_exists = [&entry_path] { return ::access(entry_path.c_str(), F_OK) == 0; };
    for (;;) {
      if (entry_exists()) return lease;
      const std::string token = fmt::format(
          "{} {} {} {:016x} {} {}\n", ::getpid(), this_host(),
          std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count(), nonce_source(),
          own_start.empty() ? "-" : own_start, this_boot().empty() ? "-" : this_boot());
      const int fd = ::open(lease_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (fd >= 0) {
        const bool written = ::write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
        ::close(fd);
        lease.m_path = lease_path;
        lease.m_token = token;
        LeaseKeeper::instance().hold(lease_path);
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
        const Holder owner = parse_holder(text);
        if (!owner.readable()) {
          stale = age > kUnreadableLeaseGrace;  // still being written, or its writer died mid-write
        } else {
          stale = age > kLeaseStaleAge || (owner.host == this_host() && holder_gone(owner));
        }
        if (!stale && !noticed && std::chrono::steady_clock::now() - started >= kWaitNotice) {
          noticed = true;
          const double held = std::chrono::duration<double>(age).count();
          if (owner.readable()) {
            // The wait ends when the entry appears, the lease goes, the lease goes stale (its holder
            // stopped refreshing it) or max_wait passes: say the nearer bound that is known now.
            const double left = std::min(
                std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count(),
                std::chrono::duration<double>(kLeaseStaleAge).count() - held);
            KILN_LOG(warn,
                     "disk cache: waiting for process {} on {} to finish compiling key {} (its compile lease {} was "
                     "refreshed {:.1f} s ago; it is broken if {:.1f} s more pass without a refresh)",
                     owner.pid, owner.host, key.hex(), lease_path, held, std::max(0.0, left));
          } else {
            KILN_LOG(warn, "disk cache: waiting on the unreadable compile lease {} of key {} (written {:.1f} s ago)",
                     lease_path, key.hex(), held);
          }
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
