// Reading the store without changing it, for the CLI (listings, verify, show): Store::scan_shard, one
// shard directory's entry files with the header or entry parser, and Store::read_file, one entry file.
#include "store_state.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "entry_io.hpp"
#include "posix_util.hpp"

namespace kiln::cache {
namespace {

using detail::distrust_reason;
using detail::errno_text;
using detail::kEntrySuffix;
using detail::kHexDigits;
using detail::ShardedNames;
using detail::to_time_point;
using detail::UniqueFd;

/// The first read of a header scan: a whole small entry, and always the fixed part, target and compiler.
constexpr std::size_t kHeaderReadBytes = 16 * 1024;

/// The buffer a shard's header reads go to. Owned by one scan_shard call (not the per-thread scratch
/// buffer of parse_file): the views handed to the callback stay valid whatever the callback reads.
class HeaderBuffer {
 public:
  std::byte* get(std::size_t bytes) {
    if (bytes > m_capacity) {
      m_data.reset();
      m_capacity = 0;
      m_data = std::make_unique_for_overwrite<std::byte[]>(bytes);
      m_capacity = bytes;
    }
    return m_data.get();
  }

 private:
  std::unique_ptr<std::byte[]> m_data;
  std::size_t m_capacity = 0;
};

/// Reads up to `count` bytes at `offset`, retrying EINTR; stops early only at the end of the file.
/// Returns the bytes read, or -1 with errno set.
ssize_t pread_full(int fd, std::byte* out, std::size_t count, std::uint64_t offset) noexcept {
  std::size_t done = 0;
  while (done < count) {
    const ssize_t n = ::pread(fd, out + done, count - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

/// What a thing in a shard directory is, for StrayFile::kind.
std::string_view file_kind(mode_t mode) noexcept {
  if (S_ISREG(mode)) return "regular file";
  if (S_ISLNK(mode)) return "symbolic link";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "device";
  return "special file";
}

/// Why Store::get refuses an entry file whatever its bytes (not ours, or group/world-writable); empty
/// when it does not.
std::string entry_refusal(const struct stat& st, uid_t euid) {
  if (st.st_uid != euid) return fmt::format("owned by uid {}, not by the current user", st.st_uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format("{}-writable (mode {:04o})", (st.st_mode & S_IWOTH) != 0 ? "world" : "group",
                       st.st_mode & 07777);
  }
  return {};
}

/// One entry file of a scan, opened relative to its shard directory. Calls fn unless the file is
/// not one list() would list (gone since readdir, a link, not a regular file).
void scan_file(int dir_fd, const char* name, ScanDepth depth, bool with_mtime, const Limits& limits, uid_t euid,
               HeaderBuffer& header_buffer, ScannedEntry& scanned, const std::function<void(const ScannedEntry&)>& fn) {
  const UniqueFd fd(::openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  std::string error;
  std::string refusal;
  auto report = [&](std::string why, bool io = false) {
    error = std::move(why);
    scanned.error = error;
    scanned.io_error = io;
    fn(scanned);
  };
  if (!fd) {
    const int open_error = errno;
    if (open_error == ENOENT || open_error == ELOOP) return;  // removed since readdir, or a link: list() skips both
    struct stat st {};                                        // what list() would say of it
    if (::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (!S_ISREG(st.st_mode)) return;
      scanned.size = static_cast<std::uint64_t>(st.st_size);
      scanned.mtime = to_time_point(st.st_mtim);
    }
    return report(fmt::format("cannot open: {}", errno_text(open_error)), true);
  }
  bool size_known = false;
  auto stat_file = [&]() -> bool {  // false: skip (not regular) or reported
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
      report(fmt::format("cannot stat: {}", errno_text(errno)), true);
      return false;
    }
    if (!S_ISREG(st.st_mode)) return false;
    scanned.size = static_cast<std::uint64_t>(st.st_size);
    scanned.mtime = to_time_point(st.st_mtim);
    size_known = true;
    if (!scanned.shard_refused) {
      refusal = entry_refusal(st, euid);
      scanned.refused = refusal;
    }
    return true;
  };
  if ((with_mtime || depth == ScanDepth::entry) && !stat_file()) return;

  if (depth == ScanDepth::entry) {
    detail::FileParseResult parsed = detail::parse_file(fd.get(), scanned.size, limits, nullptr);
    if (const auto* entry = std::get_if<Entry>(&parsed)) {
      scanned.entry = entry;
      fn(scanned);
      scanned.entry = nullptr;
      return;
    }
    if (const auto* failure = std::get_if<detail::IoFailure>(&parsed))
      return report("I/O error: " + failure->what, true);
    return report(std::get<ContentError>(std::move(parsed)).reason);
  }

  // A header: one read. Without an fstat, a read that stops short of the buffer stopped at the end of the
  // file (a regular file), so it gave the size; a content error found with that size is re-checked
  // against fstat before it is reported.
  const detail::HeaderParts parts = depth == ScanDepth::lane ? detail::HeaderParts::texts : detail::HeaderParts::all;
  std::byte* buffer = header_buffer.get(kHeaderReadBytes);
  std::size_t want =
      size_known ? static_cast<std::size_t>(std::min<std::uint64_t>(scanned.size, kHeaderReadBytes)) : kHeaderReadBytes;
  ssize_t got = -1;
  if (size_known) {
    got = pread_full(fd.get(), buffer, want, 0);
  } else {
    do {
      got = ::read(fd.get(), buffer, want);
    } while (got < 0 && errno == EINTR);
  }
  if (got < 0) return report(fmt::format("I/O error: read failed: {}", errno_text(errno)), true);
  if (!size_known) {
    if (static_cast<std::size_t>(got) < want) {
      scanned.size = static_cast<std::uint64_t>(got);
    } else if (!stat_file()) {
      return;
    }
  }
  auto length = static_cast<std::size_t>(got);
  for (;;) {
    detail::HeaderParseResult parsed =
        detail::parse_header(std::span<const std::byte>(buffer, length), scanned.size, parts, limits);
    if (const auto* header = std::get_if<EntryHeaderView>(&parsed)) {
      scanned.header = header;
      fn(scanned);
      scanned.header = nullptr;
      return;
    }
    if (const auto* need = std::get_if<detail::NeedBytes>(&parsed)) {
      // A header longer than the first read (a long canonical key): read it whole. The length was
      // checked against the limits and the file size before it was asked for.
      want = static_cast<std::size_t>(need->bytes);
      buffer = header_buffer.get(want);
      got = pread_full(fd.get(), buffer, want, 0);
      if (got < 0) return report(fmt::format("I/O error: read failed: {}", errno_text(errno)), true);
      if (static_cast<std::size_t>(got) < want) {
        return report(fmt::format("truncated while reading: file shorter than its {} bytes", scanned.size));
      }
      length = want;
      continue;
    }
    if (!size_known) {
      // The size came from the read: make sure before calling the entry damaged.
      const std::uint64_t seen = scanned.size;
      if (!stat_file()) return;
      if (scanned.size != seen) {
        want = static_cast<std::size_t>(std::min<std::uint64_t>(scanned.size, kHeaderReadBytes));
        got = pread_full(fd.get(), buffer, want, 0);
        if (got < 0) return report(fmt::format("I/O error: read failed: {}", errno_text(errno)), true);
        length = static_cast<std::size_t>(got);
        continue;
      }
    }
    return report(std::get<ContentError>(std::move(parsed)).reason);
  }
}

}  // namespace

void Store::scan_shard(unsigned shard, ScanDepth depth, bool with_mtime,
                       const std::function<void(const ScannedEntry&)>& fn,
                       const std::function<void(const StrayFile&)>& on_stray) const {
  const State& s = *m_state;
  if (s.v1_dir.empty() || shard >= kShardCount) return;
  // Nor is a link (or anything but a folder) in place of v1/ itself entered: the shard directory is
  // opened without following links in its last part only, so v1/'s own kind is checked here. (The
  // store refuses such a root; its entries are nobody's, and verify --fix must never remove them.)
  if (struct stat top{}; ::lstat(s.v1_dir.c_str(), &top) != 0 || !S_ISDIR(top.st_mode)) return;
  const char shard_name[2] = {kHexDigits[shard >> 4], kHexDigits[shard & 0xF]};
  std::string path;
  path.reserve(s.v1_dir.size() + 4 + 30 + kEntrySuffix.size());
  path.append(s.v1_dir).append("/").append(shard_name, 2);
  // A link or any other non-directory in place of the shard directory is reported as what it is, never
  // entered (its target's files would be taken for this cache's, and removed by verify --fix).
  const ShardedNames::Opened opened = s.entries.open_shard(path);
  const int dir_fd = opened.fd;
  if (dir_fd < 0) {
    if (opened.is_link_or_file && on_stray) {
      const struct stat& st = opened.in_place;
      on_stray(StrayFile{path, file_kind(st.st_mode), std::nullopt, static_cast<std::uint64_t>(st.st_size),
                         to_time_point(st.st_mtim)});
    }
    return;
  }
  path.append("/");
  DIR* dir = ::fdopendir(dir_fd);
  if (dir == nullptr) {
    ::close(dir_fd);
    return;
  }
  struct Closer {
    DIR* dir;
    ~Closer() { ::closedir(dir); }
  } closer{dir};
  const std::size_t base = path.size();
  // The directory itself, judged as Store::get judges it: its entries are refused with it.
  std::string shard_refusal;
  if (struct stat st{}; ::fstat(dir_fd, &st) == 0) {
    shard_refusal = distrust_reason("shard directory", path.substr(0, base - 1), st);
  }
  const uid_t euid = ::geteuid();
  HeaderBuffer header_buffer;
  while (const dirent* file = ::readdir(dir)) {
    const std::string_view name(file->d_name);
    if (name.empty() || name[0] == '.') continue;  // ".", "..", temp files (swept by trims), hidden files
    const auto hash = s.entries.key_of(std::string_view(shard_name, 2), name);
    struct stat st {};
    bool regular = file->d_type == DT_REG;
    bool stat_known = false;
    if (file->d_type == DT_UNKNOWN) {
      if (::fstatat(dir_fd, file->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      regular = S_ISREG(st.st_mode);
      stat_known = true;
    }
    if (!hash || !regular) {
      // Not an entry file: a link, FIFO, device or directory at an entry path, or a stray name.
      if (!on_stray || (!stat_known && ::fstatat(dir_fd, file->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)) continue;
      path.resize(base);
      path.append(name);
      on_stray(StrayFile{path, file_kind(st.st_mode), hash, static_cast<std::uint64_t>(st.st_size),
                         to_time_point(st.st_mtim)});
      continue;
    }
    path.resize(base);
    path.append(name);
    ScannedEntry scanned;
    scanned.path = path;
    scanned.file_hash = *hash;
    if (!shard_refusal.empty()) {
      scanned.refused = shard_refusal;
      scanned.shard_refused = true;
    }
    scan_file(dir_fd, file->d_name, depth, with_mtime, m_config.limits, euid, header_buffer, scanned, fn);
  }
}

std::variant<Entry, ContentError> Store::read_entry(const Hash128& key) const { return read_file(entry_path(key)); }

bool Store::contains(const Hash128& key) const noexcept {
  try {
    struct stat st {};
    return ::stat(entry_path(key).c_str(), &st) == 0 && S_ISREG(st.st_mode);
  } catch (...) {
    return false;  // the path could not be built (no memory)
  }
}

std::variant<Entry, ContentError> Store::read_file(const std::filesystem::path& path) const {
  try {
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd) return ContentError{fmt::format("cannot open: {}", errno_text(errno))};
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return ContentError{fmt::format("cannot stat: {}", errno_text(errno))};
    if (!S_ISREG(st.st_mode)) return ContentError{"not a regular file"};
    detail::FileParseResult parsed =
        detail::parse_file(fd.get(), static_cast<std::uint64_t>(st.st_size), m_config.limits, nullptr);
    if (auto* entry = std::get_if<Entry>(&parsed)) return std::move(*entry);
    if (auto* failure = std::get_if<detail::IoFailure>(&parsed)) return ContentError{"I/O error: " + failure->what};
    return std::get<ContentError>(std::move(parsed));
  } catch (const std::exception& error) {
    return ContentError{error.what()};
  }
}

}  // namespace kiln::cache
