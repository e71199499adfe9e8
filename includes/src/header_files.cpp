#include "header_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <optional>
#include <system_error>
#include <unordered_map>

#include "kiln/includes/dep_manifest.hpp"
#include "paths.hpp"
#include "posix_util.hpp"
#include "stat_memo.hpp"

namespace kiln::cache {

// ---- file identity (declared in kiln/includes/dep_manifest.hpp) -----------------------------------------------

FileStat to_file_stat(const struct ::stat& st) noexcept {
  FileStat out;
  out.size = static_cast<std::uint64_t>(st.st_size);
  out.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  out.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  out.inode = static_cast<std::uint64_t>(st.st_ino);
  out.device = static_cast<std::uint64_t>(st.st_dev);
  return out;
}

std::int64_t realtime_now_ns() noexcept {
  struct timespec now {};
  if (::clock_gettime(CLOCK_REALTIME, &now) != 0) return 0;  // time 0: nothing counts as settled
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

}  // namespace kiln::cache

namespace kiln::cache::detail {

// ---- the one way a header is read ---------------------------------------------------------------------------

bool stat_is_settled(const FileStat& stat, std::int64_t now_ns, std::chrono::nanoseconds window) noexcept {
  // A time in the future (clock skew) is never settled.
  const std::int64_t limit = now_ns - static_cast<std::int64_t>(window.count());
  return stat.mtime_ns < limit && stat.ctime_ns < limit;
}

HeaderRead read_header_file(const char* path, std::string& bytes, std::uint64_t max_bytes, std::int64_t now_ns,
                            std::chrono::nanoseconds window) {
  HeaderRead out;
  const auto fail = [&out](const char* what) {
    out.status = HeaderRead::Status::failed;
    out.error = errno;
    out.what = what;
    return out;
  };
  int fd = -1;
  do {
    fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return fail("open");
  const UniqueFd file(fd);
  struct stat before {};
  if (::fstat(file.get(), &before) != 0) return fail("fstat");
  out.stat = to_file_stat(before);
  if (!S_ISREG(before.st_mode)) {
    out.status = HeaderRead::Status::not_regular;
    return out;
  }
  const auto too_large = [&out](std::uint64_t size) {
    out.status = HeaderRead::Status::too_large;
    out.size = size;
    return out;
  };
  const std::uint64_t size = out.stat.size;
  if (size > max_bytes) return too_large(size);

  bytes.clear();
  bytes.resize(static_cast<std::size_t>(size) + 1);  // one more byte: a file that grew shows it
  std::size_t filled = 0;
  while (true) {
    if (filled == bytes.size()) {
      if (bytes.size() > max_bytes) return too_large(bytes.size());
      bytes.resize(std::min<std::size_t>(bytes.size() * 2, max_bytes + 1));
    }
    const ssize_t got = ::read(file.get(), bytes.data() + filled, bytes.size() - filled);
    if (got < 0) {
      if (errno == EINTR) continue;
      return fail("read");
    }
    if (got == 0) break;
    filled += static_cast<std::size_t>(got);
  }
  bytes.resize(filled);
  struct stat after {};
  if (::fstat(file.get(), &after) != 0) return fail("fstat");
  out.status = HeaderRead::Status::ok;
  out.digest = hash128(bytes);
  out.steady = filled == size && to_file_stat(after) == out.stat;
  out.trusted = out.steady && stat_is_settled(out.stat, now_ns, window);
  return out;
}

// ---- the process's header files -----------------------------------------------------------------------------

struct HeaderFileCache::State {
  mutable std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<const File>> files;
  std::uint64_t bytes = 0;
  mutable std::uint64_t hits = 0;
};

HeaderFileCache::HeaderFileCache() : m_state(std::make_unique<State>()) {}
HeaderFileCache::~HeaderFileCache() = default;

std::shared_ptr<const HeaderFileCache::File> HeaderFileCache::find(const std::string& path,
                                                                   const FileStat& stat) const {
  const std::lock_guard lock(m_state->mutex);
  const auto it = m_state->files.find(path);
  if (it == m_state->files.end() || it->second->record.stat != stat) return nullptr;
  ++m_state->hits;
  return it->second;
}

void HeaderFileCache::put(const std::string& path, std::shared_ptr<const File> file) {
  const std::lock_guard lock(m_state->mutex);
  State& s = *m_state;
  if (file->bytes.size() > kMaxBytes) return;
  if (s.bytes + file->bytes.size() > kMaxBytes) {
    s.files.clear();
    s.bytes = 0;
  }
  auto [it, inserted] = s.files.try_emplace(path, file);
  if (!inserted) {
    s.bytes -= it->second->bytes.size();
    it->second = file;
  }
  s.bytes += file->bytes.size();
}

HeaderFileCache::Usage HeaderFileCache::usage() const {
  const std::lock_guard lock(m_state->mutex);
  return {m_state->files.size(), m_state->bytes, m_state->hits};
}

// ---- a resolve's headers ------------------------------------------------------------------------------------

HeaderProbe probe_header(const std::string& path, const FileAccess& access) {
  if (access.cache != nullptr && access.memo != nullptr) {
    if (const std::optional<StatMemo::Seen> seen = access.memo->find(path, access.now_ns)) {
      ++access.work->memo_hits;
      if (!seen->present) return {};
      if (auto hit = access.cache->find(path, seen->stat)) return {HeaderProbe::State::cached, std::move(hit)};
      // Present, but not the file the cache holds: a stat below says whether it is a regular file.
    }
  }
  ++access.work->stats;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR || error == ENAMETOOLONG || error == ELOOP) {
      if (access.memo != nullptr && access.cache != nullptr && (error == ENOENT || error == ENOTDIR)) {
        access.memo->remember(path, StatMemo::Seen{false, {}, access.now_ns});
      }
      return {};
    }
    return {HeaderProbe::State::unread, nullptr};  // another error: reading it says what it is
  }
  const FileStat stat = to_file_stat(st);
  if (access.memo != nullptr && access.cache != nullptr) access.memo->remember(path, StatMemo::Seen{true, stat, access.now_ns});
  if (!S_ISREG(st.st_mode)) return {};
  if (access.cache != nullptr) {
    if (auto hit = access.cache->find(path, stat)) return {HeaderProbe::State::cached, std::move(hit)};
  }
  return {HeaderProbe::State::unread, nullptr};
}

std::shared_ptr<const HeaderFileCache::File> load_header(const std::string& path, const FileAccess& access) {
  if (access.cache != nullptr) {
    std::optional<StatMemo::Seen> seen;
    if (access.memo != nullptr) seen = access.memo->find(path, access.now_ns);
    if (seen) {
      ++access.work->memo_hits;
      if (!seen->present) return nullptr;
      if (auto hit = access.cache->find(path, seen->stat)) return hit;
      // Not the file the cache holds (or none): read it below.
    } else {
      ++access.work->stats;
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0) {
        const FileStat stat = to_file_stat(st);
        if (access.memo != nullptr) access.memo->remember(path, StatMemo::Seen{true, stat, access.now_ns});
        if (!S_ISREG(st.st_mode)) return nullptr;
        if (auto hit = access.cache->find(path, stat)) return hit;
      } else if (errno == ENOENT || errno == ENOTDIR || errno == ENAMETOOLONG || errno == ELOOP) {
        if (access.memo != nullptr && (errno == ENOENT || errno == ENOTDIR)) {
          access.memo->remember(path, StatMemo::Seen{false, {}, access.now_ns});
        }
        return nullptr;
      }  // another error: reading says what it is
    }
  }
  ++access.work->reads;
  auto file = std::make_shared<HeaderFileCache::File>();
  const HeaderRead read =
      read_header_file(path.c_str(), file->bytes, kMaxHeaderBytes, access.now_ns, access.trust_window);
  switch (read.status) {
    case HeaderRead::Status::ok:
      break;
    case HeaderRead::Status::not_regular:  // a folder (or device, FIFO) is not a header
      return nullptr;
    case HeaderRead::Status::too_large:
      throw IncludeError(fmt::format("header '{}' is {} bytes; kiln reads headers of at most {} MiB", path, read.size,
                                     kMaxHeaderBytes >> 20));
    case HeaderRead::Status::failed: {
      const std::string_view call = read.what;
      const int error = read.error;
      if (call == "open") {
        if (error == ENOENT || error == ENOTDIR || error == ENAMETOOLONG || error == ELOOP) return nullptr;
        throw IncludeError(fmt::format("cannot open header '{}': {}", path, std::strerror(error)));
      }
      throw IncludeError(
          fmt::format("cannot {} header '{}': {}", call == "read" ? "read" : "stat", path, std::strerror(error)));
    }
  }
  file->record.path = path;
  file->record.stat = read.stat;
  file->record.digest = read.digest;
  file->record.trusted_stat = read.trusted;
  scan_includes(file->bytes, file->scan);
  if (access.cache != nullptr && file->record.trusted_stat) access.cache->put(path, file);
  return file;
}

HeaderReadAhead::HeaderReadAhead(const FileAccess& access, std::span<const std::string> folders)
    : m_access(access),
      m_folders(folders.begin(), folders.end()),
      m_threads_wanted(access.cache == nullptr ? 0 : std::min(4U, std::thread::hardware_concurrency() / 2)) {
  m_access.memo = nullptr;  // the helpers stat for themselves: the resolve's memo answers stay its own
  m_access.work = nullptr;
}

HeaderReadAhead::~HeaderReadAhead() { (void)finish(); }

std::uint32_t HeaderReadAhead::finish() {
  {
    const std::lock_guard lock(m_mutex);
    m_stop = true;
    m_stack.clear();
  }
  m_ready.notify_all();
  for (std::thread& thread : m_threads) thread.join();
  m_threads.clear();
  std::uint32_t reads = 0;
  for (const FileWork& w : m_works) reads += w.reads;
  return reads;
}

void HeaderReadAhead::start() {
  if (!m_threads.empty() || m_threads_wanted == 0) return;
  m_works.resize(m_threads_wanted);  // before any helper: they keep references into it
  try {
    for (unsigned t = 0; t < m_threads_wanted; ++t) m_threads.emplace_back([this, t] { run(m_works[t]); });
  } catch (const std::system_error&) {
    // Fewer helpers (or none): the resolve reads what they do not.
  }
}

void HeaderReadAhead::add(const Includer& includer, const std::vector<IncludeRef>& refs) {
  if (m_threads_wanted == 0 || refs.empty()) return;
  Task task;
  task.refs = &refs;
  task.from_disk = includer.from_disk;
  task.dir = std::string(includer.dir);
  task.folder = includer.folder;
  push(std::move(task));
}

void HeaderReadAhead::push(Task task) {
  {
    const std::lock_guard lock(m_mutex);
    if (m_stop) return;
    m_stack.push_back(std::move(task));
  }
  m_ready.notify_one();
}

void HeaderReadAhead::expand(const Task& file) {
  const Includer includer{file.from_disk, file.dir, file.folder};
  std::vector<Task> reads;
  reads.reserve(file.refs->size());
  for (const IncludeRef& ref : *file.refs) {
    Task read;
    each_include_place(includer, ref, m_folders, [&](IncludePlace place) {
      if (!place.memory) read.places.push_back(std::move(place));
      return false;
    });
    if (!read.places.empty()) reads.push_back(std::move(read));
  }
  {
    const std::lock_guard lock(m_mutex);
    if (m_stop) return;
    for (auto it = reads.rbegin(); it != reads.rend(); ++it) {  // the first include on top
      if (m_seen.insert(it->places.front().path).second) m_stack.push_back(std::move(*it));
    }
  }
  m_ready.notify_all();
}

void HeaderReadAhead::wait_for(const std::string& path) {
  std::unique_lock lock(m_mutex);
  m_read.wait(lock, [&] { return !m_in_flight.contains(path); });
}

void HeaderReadAhead::run(FileWork& work) {
  FileAccess access = m_access;
  access.work = &work;
  for (;;) {
    Task task;
    {
      std::unique_lock lock(m_mutex);
      m_ready.wait(lock, [&] { return m_stop || !m_stack.empty(); });
      if (m_stop) return;
      task = std::move(m_stack.back());
      m_stack.pop_back();
    }
    if (task.refs != nullptr) {
      expand(task);
      continue;
    }
    for (const IncludePlace& place : task.places) {
      {
        const std::lock_guard lock(m_mutex);
        if (m_stop) return;
        m_in_flight.insert(place.path);
      }
      std::shared_ptr<const HeaderFileCache::File> file;
      bool failed = false;
      try {
        file = load_header(place.path, access);
      } catch (...) {
        failed = true;  // a file that cannot be read: the resolve meets it if it takes the include
      }
      {
        const std::lock_guard lock(m_mutex);
        m_in_flight.erase(place.path);
      }
      m_read.notify_all();
      if (failed) break;
      if (!file) continue;
      // Then the file's own includes, searched as the resolve will search them from it.
      Task next;
      next.refs = &file->scan.refs;
      next.keep = file;
      next.from_disk = true;
      next.dir = dirname(place.path);
      next.folder = place.folder;
      push(std::move(next));
      break;
    }
  }
}

}  // namespace kiln::cache::detail
