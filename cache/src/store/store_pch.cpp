// Precompiled headers in the store (kiln/cache/pch_store.hpp: the layout, the trailer's grammar, why a file is
// never changed in place): opening one and checking it whole, making one through a temp file, publishing it
// under the PCH share and the cache's size cap, the records, and what the CLI lists and checks.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <random>

#include "atomic_file.hpp"
#include "kiln/base/log.hpp"
#include "kiln/base/xxh3.hpp"
#include "le_bytes.hpp"
#include "posix_util.hpp"
#include "store_state.hpp"

namespace kiln::cache {
namespace {

using detail::UniqueFd;

constexpr std::array<char, 8> kMagic = {'K', 'I', 'L', 'N', 'P', 'C', 'H', '\0'};
/// A label longer than this is cut (it is a line for `kiln cache ls`).
constexpr std::size_t kMaxLabel = 4096;

std::int64_t nanoseconds_of(const struct timespec& ts) noexcept {
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// The trailer's fields.
struct Trailer {
  std::uint32_t version = 0, label_bytes = 0;
  std::uint64_t pch_bytes = 0;
  Hash128 key{}, checksum{};
  std::int64_t made_unix = 0;
};

std::array<std::byte, kPchTrailerBytes> encode(const Trailer& t) {
  std::array<std::byte, kPchTrailerBytes> out{};
  std::memcpy(out.data(), kMagic.data(), kMagic.size());
  detail::store_u32(out.data() + 8, t.version);
  detail::store_u32(out.data() + 12, t.label_bytes);
  detail::store_u64(out.data() + 16, t.pch_bytes);
  detail::store_hash(out.data() + 24, t.key);
  detail::store_hash(out.data() + 40, t.checksum);
  detail::store_u64(out.data() + 56, static_cast<std::uint64_t>(t.made_unix));
  return out;
}

/// The trailer of a file of `file_bytes` bytes, or why it is not one of ours.
std::variant<Trailer, std::string> decode(const std::array<std::byte, kPchTrailerBytes>& in, std::uint64_t file_bytes) {
  if (std::memcmp(in.data(), kMagic.data(), kMagic.size()) != 0) return std::string("no kiln PCH trailer (foreign)");
  Trailer t;
  t.version = detail::load_u32(in.data() + 8);
  t.label_bytes = detail::load_u32(in.data() + 12);
  t.pch_bytes = detail::load_u64(in.data() + 16);
  t.key = detail::load_hash(in.data() + 24);
  t.checksum = detail::load_hash(in.data() + 40);
  t.made_unix = static_cast<std::int64_t>(detail::load_u64(in.data() + 56));
  if (t.version != kPchFormatVersion) return fmt::format("PCH format version {} (this kiln reads {})", t.version, kPchFormatVersion);
  if (t.label_bytes > kMaxLabel || t.pch_bytes == 0 || t.pch_bytes + t.label_bytes + kPchTrailerBytes != file_bytes) {
    return fmt::format("the trailer's sizes ({} + {} + {}) are not the file's {} bytes (cut short or grown)",
                       t.pch_bytes, t.label_bytes, kPchTrailerBytes, file_bytes);
  }
  return t;
}

/// Reads the trailer of an open file of `file_bytes` bytes.
std::variant<Trailer, std::string> read_trailer(int fd, std::uint64_t file_bytes) {
  if (file_bytes < kPchTrailerBytes) return fmt::format("{} bytes: shorter than a trailer (cut short)", file_bytes);
  std::array<std::byte, kPchTrailerBytes> bytes{};
  const ssize_t n = ::pread(fd, bytes.data(), bytes.size(), static_cast<off_t>(file_bytes - kPchTrailerBytes));
  if (n < 0) return fmt::format("I/O error reading the trailer: {}", std::strerror(errno));
  if (static_cast<std::size_t>(n) != bytes.size()) return std::string("cut short while read");
  return decode(bytes, file_bytes);
}

/// XXH3-128 (kPchChecksumSeed) of the first `bytes` bytes of `fd`, read with pread: never mapped, so a file
/// cut short by someone else while it is read is a short read here, not a SIGBUS. `label`, when given,
/// receives the last `label_bytes` of them.
std::variant<Hash128, std::string> hash_file(int fd, std::uint64_t bytes, std::uint32_t label_bytes = 0,
                                             std::string* label = nullptr) {
  detail::Xxh3Stream stream(kPchChecksumSeed);
  std::vector<std::byte> buffer(1 << 20);
  std::uint64_t at = 0;
  while (at < bytes) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), bytes - at));
    const ssize_t n = ::pread(fd, buffer.data(), want, static_cast<off_t>(at));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fmt::format("I/O error at byte {}: {}", at, std::strerror(errno));
    }
    if (n == 0) return fmt::format("cut short while read (at byte {} of {})", at, bytes);
    stream.update(buffer.data(), static_cast<std::size_t>(n));
    at += static_cast<std::uint64_t>(n);
  }
  if (label != nullptr && label_bytes > 0) {
    label->resize(label_bytes);
    if (::pread(fd, label->data(), label_bytes, static_cast<off_t>(bytes - label_bytes)) != label_bytes) label->clear();
  }
  return stream.digest();
}

/// Why a file of the store may not be trusted, from its fstat: not a regular file, not ours, or writable by
/// others (the entries' rule, store.hpp).
std::string distrust_file(const struct stat& st, uid_t euid) {
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_uid != euid) return fmt::format("owned by uid {}, not by the current user", st.st_uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return fmt::format("group/world-writable (mode {:04o})", st.st_mode & 07777);
  return {};
}

void join(std::string& out, const std::vector<double>& values) {
  for (const double v : values) out += fmt::format(" {:.3f}", v);
}

/// The numbers of a record line (times in ms), up to the first that does not parse or is not a finite number
/// >= 0 (a hostile record's "nan" would poison every comparison of the verdict). std::from_chars, not a
/// stream: a stream reads through the process's global locale (a host that sets a locale with a decimal comma
/// would read "1.5" as 1), and its facets are where a process holding two copies of libstdc++ broke (a PCH
/// record read in a CuPy worker jumped into libkiln's read-only data on the H100, 2026-12-07).
std::vector<double> parse_numbers(std::string_view text) {
  std::vector<double> out;
  const char* at = text.data();
  const char* const end = at + text.size();
  while (true) {
    while (at != end && (*at == ' ' || *at == '\t')) ++at;
    double v = 0;
    const auto [next, ec] = std::from_chars(at, end, v);
    if (at == end || ec != std::errc{} || !std::isfinite(v) || v < 0) return out;
    out.push_back(v);
    at = next;
  }
}

}  // namespace

// ---- PchFile, PchDraft ----

PchFile::PchFile(PchFile&& other) noexcept { *this = std::move(other); }
PchFile& PchFile::operator=(PchFile&& other) noexcept {
  if (this != &other) {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = std::exchange(other.m_fd, -1);
    m_key = other.m_key;
    m_pch_bytes = other.m_pch_bytes;
    m_file_bytes = other.m_file_bytes;
    m_label = std::move(other.m_label);
    m_path = std::move(other.m_path);
    m_check_time = other.m_check_time;
    m_inode = other.m_inode;
    m_mtime_ns = other.m_mtime_ns;
    m_ctime_ns = other.m_ctime_ns;
  }
  return *this;
}
PchFile::~PchFile() {
  if (m_fd >= 0) ::close(m_fd);
}
std::string PchFile::compiler_path() const { return fmt::format("/proc/self/fd/{}", m_fd); }
bool PchFile::unchanged() const noexcept {
  struct stat st {};
  return m_fd >= 0 && ::fstat(m_fd, &st) == 0 && st.st_nlink > 0 && st.st_ino == m_inode &&
         static_cast<std::uint64_t>(st.st_size) == m_file_bytes && nanoseconds_of(st.st_mtim) == m_mtime_ns &&
         nanoseconds_of(st.st_ctim) == m_ctime_ns;
}

PchDraft::PchDraft(PchDraft&& other) noexcept { *this = std::move(other); }
PchDraft& PchDraft::operator=(PchDraft&& other) noexcept {
  if (this != &other) {
    if (!m_temp.empty()) ::unlink(m_temp.c_str());
    m_key = other.m_key;
    m_temp = std::move(other.m_temp);
    m_final = std::move(other.m_final);
    other.m_temp.clear();
  }
  return *this;
}
PchDraft::~PchDraft() {
  if (!m_temp.empty()) ::unlink(m_temp.c_str());
}

// ---- PchRecord ----

std::string_view to_string(PchRecord::Verdict verdict) noexcept {
  switch (verdict) {
    case PchRecord::Verdict::learning:
      return "learning";
    case PchRecord::Verdict::pays:
      return "pays";
    case PchRecord::Verdict::does_not_pay:
      return "does-not-pay";
    case PchRecord::Verdict::too_large:
      return "too-large";
  }
  return "?";
}

std::string PchRecord::serialize() const {
  std::string out = fmt::format("kiln-pch-record 1\nverdict {}\n", to_string(verdict));
  out += "without_ms";
  join(out, without_ms);
  out += "\nwith_ms";
  join(out, with_ms);
  out += fmt::format("\nmake_ms {:.3f}\npch_bytes {}\nlimit {}\nwhy ", make_ms, pch_bytes, limit);
  for (const char c : why) out.push_back(c == '\n' ? ' ' : c);
  out.push_back('\n');
  return out;
}

std::optional<PchRecord> PchRecord::parse(std::string_view text) {
  if (!text.starts_with("kiln-pch-record 1\n")) return std::nullopt;
  PchRecord r;
  bool verdict_seen = false;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    const std::size_t space = line.find(' ');
    const std::string_view name = line.substr(0, space), value = space == std::string_view::npos ? "" : line.substr(space + 1);
    if (name == "verdict") {
      verdict_seen = true;
      if (value == "learning") r.verdict = Verdict::learning;
      else if (value == "pays") r.verdict = Verdict::pays;
      else if (value == "does-not-pay") r.verdict = Verdict::does_not_pay;
      else if (value == "too-large") r.verdict = Verdict::too_large;
      else return std::nullopt;
    } else if (name == "without_ms") {
      r.without_ms = parse_numbers(value);
    } else if (name == "with_ms") {
      r.with_ms = parse_numbers(value);
    } else if (name == "make_ms") {
      const auto v = parse_numbers(value);
      r.make_ms = v.empty() ? 0 : v.front();
    } else if (name == "pch_bytes" || name == "limit") {
      std::uint64_t v = 0;
      std::from_chars(value.data(), value.data() + value.size(), v);
      (name == "pch_bytes" ? r.pch_bytes : r.limit) = v;
    } else if (name == "why") {
      r.why = value;
    }
  }
  if (!verdict_seen) return std::nullopt;
  return r;
}

// ---- Store ----

std::filesystem::path Store::pch_folder() const { return m_state->pch_dir; }

std::variant<PchFile, PchMiss> Store::open_pch(const Hash128& key) {
  State& s = *m_state;
  if (s.pch_dir.empty() || s.mode.load() == StoreMode::memory_only) return PchMiss{"no disk cache"};
  const auto started = std::chrono::steady_clock::now();
  const std::string path = s.pch_files.path_of(key);
  const std::string shard = path.substr(0, path.rfind('/'));
  struct stat shard_st {};
  if (::lstat(shard.c_str(), &shard_st) != 0) return PchMiss{"none"};
  if (std::string why = detail::distrust_reason("PCH folder", shard, shard_st); !why.empty()) return PchMiss{why};
  PchFile file;
  file.m_fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (file.m_fd < 0) {
    const int error = errno;
    if (error == ENOENT) return PchMiss{"none"};
    // A link or a FIFO in its place is not ours to read: removed as a damaged entry would be.
    struct stat in_place {};
    if ((error == ELOOP || error == ENXIO) && ::lstat(path.c_str(), &in_place) == 0 &&
        s.mode.load() == StoreMode::read_write && s.unlink_if_same(path, in_place)) {
      return PchMiss{fmt::format("{} is not a regular file", path), true};
    }
    return PchMiss{fmt::format("cannot open {}: {}", path, std::strerror(error))};
  }
  struct stat st {};
  if (::fstat(file.m_fd, &st) != 0) return PchMiss{fmt::format("cannot stat {}: {}", path, std::strerror(errno))};
  if (std::string why = distrust_file(st, s.euid); !why.empty()) {
    // Not removed: a file that is not ours is not ours to remove either (a later make replaces it).
    return PchMiss{fmt::format("{} refused: {}", path, why)};
  }
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  std::string problem;
  std::variant<Trailer, std::string> trailer = read_trailer(file.m_fd, file_bytes);
  if (const auto* why = std::get_if<std::string>(&trailer)) {
    problem = *why;
  } else if (const Trailer& t = std::get<Trailer>(trailer); t.key != key) {
    problem = fmt::format("its trailer names key {}", t.key.hex());
  } else {
    std::variant<Hash128, std::string> sum = hash_file(file.m_fd, t.pch_bytes + t.label_bytes, t.label_bytes, &file.m_label);
    if (const auto* error = std::get_if<std::string>(&sum)) {
      problem = *error;
    } else if (std::get<Hash128>(sum) != t.checksum) {
      problem = "checksum mismatch (damaged)";
    } else {
      file.m_pch_bytes = t.pch_bytes;
    }
  }
  if (!problem.empty()) {
    // An I/O error may be transient: the file may be fine, and is kept.
    if (problem.starts_with("I/O error")) return PchMiss{fmt::format("{}: {}", path, problem)};
    const bool removed = s.mode.load() == StoreMode::read_write && s.unlink_if_same(path, st);
    return PchMiss{fmt::format("{}: {}", path, problem), removed};
  }
  file.m_key = key;
  file.m_file_bytes = file_bytes;
  file.m_path = path;
  file.m_inode = st.st_ino;
  file.m_mtime_ns = nanoseconds_of(st.st_mtim);
  file.m_ctime_ns = nanoseconds_of(st.st_ctim);
  // Its LRU age, as a hit touches an entry: at most once per kTouchInterval. Touching changes the times the
  // open file is later compared with: take them again.
  if (s.mode.load() == StoreMode::read_write &&
      std::chrono::system_clock::now() - detail::to_time_point(st.st_mtim) > kTouchInterval &&
      ::futimens(file.m_fd, nullptr) == 0 && ::fstat(file.m_fd, &st) == 0) {
    file.m_mtime_ns = nanoseconds_of(st.st_mtim);
    file.m_ctime_ns = nanoseconds_of(st.st_ctim);
  }
  file.m_check_time = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started);
  return file;
}

std::optional<PchDraft> Store::begin_pch(const Hash128& key, std::string& why) {
  State& s = *m_state;
  if (s.mode.load() != StoreMode::read_write) {
    why = fmt::format("the disk cache is {}", to_string(s.mode.load()));
    return std::nullopt;
  }
  PchDraft draft;
  draft.m_key = key;
  draft.m_final = s.pch_files.path_of(key);
  if (const int error = s.pch_files.make_shard_folder(draft.m_final, s.root); error != 0) {
    why = fmt::format("cannot create the folder of {}: {}", draft.m_final, std::strerror(error));
    return std::nullopt;
  }
  const std::string shard = draft.m_final.substr(0, draft.m_final.rfind('/'));
  struct stat shard_st {};
  if (::lstat(shard.c_str(), &shard_st) != 0) {
    why = fmt::format("cannot stat {}: {}", shard, std::strerror(errno));
    return std::nullopt;
  }
  if (why = detail::distrust_reason("PCH folder", shard, shard_st); !why.empty()) return std::nullopt;
  // Named as AtomicFile names its temps (".<name>.tmp.<pid>.<random>": the sweep removes one whose maker died),
  // created empty and private here; the compiler writes it.
  std::random_device random;
  const std::string name = draft.m_final.substr(draft.m_final.rfind('/') + 1);
  for (int attempt = 0; attempt < 4 && draft.m_temp.empty(); ++attempt) {
    const std::uint64_t suffix = (static_cast<std::uint64_t>(random()) << 32) | random();
    std::string temp = fmt::format("{}/.{}{}{}.{:016x}", shard, name, detail::kTempMarker, ::getpid(), suffix);
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      ::close(fd);
      draft.m_temp = std::move(temp);
    } else if (errno != EEXIST) {
      why = fmt::format("create {}: {}", temp, std::strerror(errno));
      return std::nullopt;
    }
  }
  if (draft.m_temp.empty()) {
    why = "no temp file name was free";
    return std::nullopt;
  }
  return draft;
}

bool Store::publish_pch(PchDraft&& draft_in, std::string_view label_in, std::string& why, bool* too_large) {
  State& s = *m_state;
  PchDraft draft = std::move(draft_in);  // removed on every path that does not rename it
  if (too_large != nullptr) *too_large = false;
  if (draft.m_temp.empty()) {
    why = "nothing was made";
    return false;
  }
  const UniqueFd fd(::open(draft.m_temp.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) {
    why = fmt::format("cannot open {}: {}", draft.m_temp, std::strerror(errno));
    return false;
  }
  if (st.st_size <= 0) {
    why = "the compiler wrote nothing";
    return false;
  }
  const auto pch_bytes = static_cast<std::uint64_t>(st.st_size);
  const std::string label(label_in.substr(0, kMaxLabel));
  const std::uint64_t file_bytes = pch_bytes + label.size() + kPchTrailerBytes;
  if (file_bytes > m_config.pch_limit()) {
    if (too_large != nullptr) *too_large = true;
    why = fmt::format("{} bytes, above the {} bytes precompiled headers may take (KILN_PCH_MAXSIZE, by default half "
                      "of KILN_CACHE_MAXSIZE)",
                      file_bytes, m_config.pch_limit());
    return false;
  }
  if (!label.empty() && ::pwrite(fd.get(), label.data(), label.size(), static_cast<off_t>(pch_bytes)) !=
                            static_cast<ssize_t>(label.size())) {
    why = fmt::format("write {}: {}", draft.m_temp, std::strerror(errno));
    return false;
  }
  std::variant<Hash128, std::string> sum = hash_file(fd.get(), pch_bytes + label.size());
  if (const auto* error = std::get_if<std::string>(&sum)) {
    why = fmt::format("{}: {}", draft.m_temp, *error);
    return false;
  }
  Trailer t;
  t.version = kPchFormatVersion;
  t.label_bytes = static_cast<std::uint32_t>(label.size());
  t.pch_bytes = pch_bytes;
  t.key = draft.m_key;
  t.checksum = std::get<Hash128>(sum);
  t.made_unix = static_cast<std::int64_t>(std::time(nullptr));
  const auto trailer = encode(t);
  if (::pwrite(fd.get(), trailer.data(), trailer.size(), static_cast<off_t>(pch_bytes + label.size())) !=
          static_cast<ssize_t>(trailer.size()) ||
      ::fchmod(fd.get(), 0600) != 0) {
    why = fmt::format("write {}: {}", draft.m_temp, std::strerror(errno));
    return false;
  }
  struct stat previous {};
  const bool replaces = ::lstat(draft.m_final.c_str(), &previous) == 0 && S_ISREG(previous.st_mode);
  if (::rename(draft.m_temp.c_str(), draft.m_final.c_str()) != 0) {
    why = fmt::format("rename {}: {}", draft.m_final, std::strerror(errno));
    return false;
  }
  draft.m_temp.clear();
  const auto total = s.adjust_size(static_cast<std::int64_t>(file_bytes) -
                                       (replaces ? static_cast<std::int64_t>(previous.st_size) : 0),
                                   std::nullopt, State::Measure::if_due);
  // The PCH share first (oldest .pch files go), then the whole cache (oldest of anything).
  std::vector<EntryFile> pchs;
  s.collect_pch(pchs, /*with_records=*/false);
  std::uint64_t pch_total = 0;
  for (const EntryFile& f : pchs) pch_total += f.size;
  if (pch_total > m_config.pch_limit()) {
    // Least recently used first: a use touches the record (touch_pch_record), so a set in use is not the first
    // to go because its PCH was made first.
    std::sort(pchs.begin(), pchs.end(), [](const EntryFile& a, const EntryFile& b) { return a.used() < b.used(); });
    const std::uint64_t target = m_config.pch_limit() / 10 * 9;
    const auto recent_since = std::chrono::system_clock::now() - detail::kRecentUse;
    std::size_t removed = 0, recent = 0;
    for (const EntryFile& f : pchs) {
      if (pch_total <= target) break;
      if (f.path == draft.m_final) continue;
      struct stat now {};
      if (::lstat(f.path.c_str(), &now) != 0) {
        pch_total -= f.size;
      } else if (s.unlink_if_same(f.path.string(), now)) {
        pch_total -= f.size;
        ++removed;
        recent += f.used() > recent_since ? 1 : 0;
      }
    }
    KILN_LOG(info, "precompiled headers trimmed to {} bytes (their share of the cache, KILN_PCH_MAXSIZE: {})",
             pch_total, m_config.pch_limit());
    // A share below the header sets in use makes PCHs only to evict others that are made again: say so once.
    if (recent != 0 && !s.pch_trim_warned.exchange(true)) {
      KILN_LOG(warn,
               "precompiled headers' share of the cache ({} bytes, KILN_PCH_MAXSIZE) is smaller than the header sets "
               "in use: a trim removed {} of {} used within the last hour, which will be made again (raise "
               "KILN_PCH_MAXSIZE or KILN_CACHE_MAXSIZE)",
               m_config.pch_limit(), recent, removed);
    }
  }
  if (total && *total > m_config.max_size) (void)s.trim(m_config, m_config.max_size / 10 * 9, &draft.m_final);
  return true;
}

bool Store::touch_pch_record(const Hash128& key) noexcept {
  try {
    if (m_state->mode.load() != StoreMode::read_write || m_state->pch_dir.empty()) return false;
    return ::utimensat(AT_FDCWD, m_state->pch_records.path_of(key).c_str(), nullptr, AT_SYMLINK_NOFOLLOW) == 0;
  } catch (...) {
    return false;
  }
}

bool Store::remove_pch(const Hash128& key) noexcept {
  try {
    if (m_state->mode.load() != StoreMode::read_write || m_state->pch_dir.empty()) return false;
    const std::string path = m_state->pch_files.path_of(key);
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && m_state->unlink_if_same(path, st);
  } catch (...) {
    return false;
  }
}

std::optional<PchRecord> Store::read_pch_record(const Hash128& key) const noexcept {
  try {
    if (m_state->pch_dir.empty() || m_state->mode.load() == StoreMode::memory_only) return std::nullopt;
    const UniqueFd fd(::open(m_state->pch_records.path_of(key).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !distrust_file(st, m_state->euid).empty()) return std::nullopt;
    return PchRecord::parse(detail::read_small(fd.get(), 16 * 1024));
  } catch (...) {
    return std::nullopt;
  }
}

bool Store::write_pch_record(const Hash128& key, const PchRecord& record) noexcept {
  try {
    State& s = *m_state;
    if (s.mode.load() != StoreMode::read_write || s.pch_dir.empty()) return false;
    const std::string path = s.pch_records.path_of(key);
    if (s.pch_records.make_shard_folder(path, s.root) != 0) return false;
    const std::string text = record.serialize();
    struct stat previous {};
    const bool replaces = ::lstat(path.c_str(), &previous) == 0 && S_ISREG(previous.st_mode);
    detail::AtomicFile file(path);
    if (!file.write(std::as_bytes(std::span(text.data(), text.size()))) || !file.commit()) return false;
    (void)s.adjust_size(static_cast<std::int64_t>(text.size()) - (replaces ? static_cast<std::int64_t>(previous.st_size) : 0));
    return true;
  } catch (...) {
    return false;
  }
}

CompileLease Store::acquire_pch_lease(const Hash128& key, std::chrono::milliseconds max_wait) {
  if (m_state->mode.load() != StoreMode::read_write) return CompileLease{};
  try {
    return acquire_compile_lease(m_state->lock_dir, key, m_state->pch_files.path_of(key), max_wait);
  } catch (...) {
    return CompileLease{};
  }
}

std::optional<std::uint64_t> Store::pch_free_bytes() const noexcept {
  try {
    const State& s = *m_state;
    if (s.pch_dir.empty() || s.mode.load() == StoreMode::memory_only) return std::nullopt;
    if (s.mode.load() == StoreMode::read_write) (void)detail::make_private_dir(s.pch_dir);
    struct statvfs info {};
    const std::string& where = ::access(s.pch_dir.c_str(), F_OK) == 0 ? s.pch_dir : s.root;
    if (::statvfs(where.c_str(), &info) != 0) return std::nullopt;
    return static_cast<std::uint64_t>(info.f_bavail) * info.f_frsize;
  } catch (...) {
    return std::nullopt;
  }
}

std::vector<PchListing> Store::list_pch() const {
  std::vector<PchListing> out;
  std::vector<EntryFile> files;
  m_state->collect_pch(files, /*with_records=*/true);
  for (const EntryFile& f : files) {
    PchListing item;
    item.path = f.path;
    item.key = f.file_hash;
    item.size = f.size;
    item.mtime = f.mtime;
    item.record_mtime = f.record_mtime;
    item.record = f.path.string().ends_with(kPchRecordSuffix);
    const UniqueFd fd(::open(f.path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (!fd) {
      item.problem = fmt::format("cannot open: {}", std::strerror(errno));
    } else if (item.record) {
      item.parsed_record = PchRecord::parse(detail::read_small(fd.get(), 16 * 1024));
      if (!item.parsed_record) item.problem = "not a PCH record";
    } else {
      std::variant<Trailer, std::string> trailer = read_trailer(fd.get(), f.size);
      if (const auto* why = std::get_if<std::string>(&trailer)) {
        item.problem = *why;
      } else {
        const Trailer& t = std::get<Trailer>(trailer);
        std::string label(t.label_bytes, '\0');
        if (::pread(fd.get(), label.data(), label.size(), static_cast<off_t>(t.pch_bytes)) ==
            static_cast<ssize_t>(label.size())) {
          item.label = std::move(label);
        }
        item.made_unix = t.made_unix;
        if (t.key != f.file_hash) item.problem = fmt::format("its trailer names key {}", t.key.hex());
      }
    }
    out.push_back(std::move(item));
  }
  return out;
}

std::string Store::check_pch_file(const std::filesystem::path& path) const {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  struct stat st {};
  if (!fd) return fmt::format("cannot open: {}", std::strerror(errno));
  if (::fstat(fd.get(), &st) != 0) return fmt::format("I/O error: {}", std::strerror(errno));
  if (std::string why = distrust_file(st, m_state->euid); !why.empty()) return why;
  std::variant<Trailer, std::string> trailer = read_trailer(fd.get(), static_cast<std::uint64_t>(st.st_size));
  if (const auto* why = std::get_if<std::string>(&trailer)) return *why;
  const Trailer& t = std::get<Trailer>(trailer);
  const std::string name = path.filename().string(), shard = path.parent_path().filename().string();
  if (const auto named = m_state->pch_files.key_of(shard, name); !named || *named != t.key) {
    return fmt::format("its trailer names key {}, not its file name's", t.key.hex());
  }
  std::variant<Hash128, std::string> sum = hash_file(fd.get(), t.pch_bytes + t.label_bytes);
  if (const auto* why = std::get_if<std::string>(&sum)) return *why;
  if (std::get<Hash128>(sum) != t.checksum) return "checksum mismatch (damaged)";
  return {};
}

}  // namespace kiln::cache
