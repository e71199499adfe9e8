#include "kiln/cache/pack.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <random>
#include <stdexcept>
#include <system_error>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "kiln/base/log.hpp"
#include "le_bytes.hpp"

namespace kiln::cache {
namespace {

bool key_less(const Hash128& a, const Hash128& b) noexcept {
  return a.high != b.high ? a.high < b.high : a.low < b.low;
}

using detail::load_u32;
using detail::load_u64;
using detail::store_u32;
using detail::store_u64;

std::string system_error_text(int error) { return std::error_code(error, std::system_category()).message(); }

/// Writes all of `bytes` at the descriptor's position; false with errno set on failure.
bool write_all(int fd, const std::byte* bytes, std::size_t size) noexcept {
  while (size > 0) {
    const ssize_t n = ::write(fd, bytes, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

/// Reads exactly `size` bytes at `offset`; false on an error or a short file (errno 0 then).
bool pread_all(int fd, std::byte* bytes, std::size_t size, std::uint64_t offset) noexcept {
  while (size > 0) {
    const ssize_t n = ::pread(fd, bytes, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = 0;
      return false;
    }
    bytes += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return true;
}

std::array<std::byte, kPackHeaderBytes> encode_header(std::uint64_t entry_count, std::uint64_t index_offset) {
  std::array<std::byte, kPackHeaderBytes> header{};
  std::memcpy(header.data(), kPackMagic, sizeof(kPackMagic));
  store_u32(header.data() + 8, kPackFormatVersion);
  store_u32(header.data() + 12, 0);
  store_u64(header.data() + 16, entry_count);
  store_u64(header.data() + 24, index_offset);
  // bytes 32..47: reserved, zero
  return header;
}

std::vector<std::byte> encode_index(const std::vector<PackRecord>& records) {
  std::vector<std::byte> index(records.size() * kPackRecordBytes);
  std::byte* out = index.data();
  for (const PackRecord& record : records) {
    store_u64(out, record.key.high);
    store_u64(out + 8, record.key.low);
    store_u64(out + 16, record.offset);
    store_u64(out + 24, record.length);
    out += kPackRecordBytes;
  }
  return index;
}

Hash128 index_checksum(std::span<const std::byte> header, std::span<const std::byte> index) {
  std::vector<std::byte> covered;
  covered.reserve(header.size() + index.size());
  covered.insert(covered.end(), header.begin(), header.end());
  covered.insert(covered.end(), index.begin(), index.end());
  return hash128(covered, kPackChecksumSeed);
}

std::filesystem::path temp_path_for(const std::filesystem::path& path) {
  std::random_device random;
  const auto name = fmt::format(".{}.tmp.{}.{:08x}", path.filename().string(), ::getpid(), random());
  return path.parent_path() / name;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// PackWriter

PackWriter::PackWriter(std::filesystem::path path) : m_path(std::move(path)) {
  if (m_path.filename().empty()) throw std::runtime_error(fmt::format("pack {}: not a file name", m_path.string()));
  m_temp_path = temp_path_for(m_path);
  m_fd = ::open(m_temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (m_fd < 0) {
    throw std::runtime_error(
        fmt::format("pack {}: cannot create {}: {}", m_path.string(), m_temp_path.string(), system_error_text(errno)));
  }
  const std::array<std::byte, kPackHeaderBytes> placeholder{};
  if (!write_all(m_fd, placeholder.data(), placeholder.size())) {
    const int error = errno;
    ::close(m_fd);
    m_fd = -1;
    ::unlink(m_temp_path.c_str());
    throw std::runtime_error(fmt::format("pack {}: write failed: {}", m_path.string(), system_error_text(error)));
  }
  m_offset = kPackHeaderBytes;
}

PackWriter::~PackWriter() {
  if (m_fd >= 0) {
    ::close(m_fd);
    ::unlink(m_temp_path.c_str());
  }
}

std::uint64_t PackWriter::data_bytes() const noexcept { return m_offset - kPackHeaderBytes; }

bool PackWriter::add(const Entry& entry) {
  if (m_fd < 0) throw std::runtime_error(fmt::format("pack {}: add() after commit()", m_path.string()));
  if (!m_keys.insert(entry.key_hash).second) return false;
  const std::vector<std::byte> bytes = serialize(entry);
  if (!write_all(m_fd, bytes.data(), bytes.size())) {
    const int error = errno;
    m_keys.erase(entry.key_hash);
    throw std::runtime_error(fmt::format("pack {}: write failed: {}", m_path.string(), system_error_text(error)));
  }
  m_records.push_back(PackRecord{entry.key_hash, m_offset, bytes.size()});
  m_offset += bytes.size();
  return true;
}

void PackWriter::commit() {
  if (m_fd < 0) throw std::runtime_error(fmt::format("pack {}: commit() called twice", m_path.string()));
  std::sort(m_records.begin(), m_records.end(),
            [](const PackRecord& a, const PackRecord& b) { return key_less(a.key, b.key); });
  const auto header = encode_header(m_records.size(), m_offset);
  const std::vector<std::byte> index = encode_index(m_records);
  const Hash128 checksum = index_checksum(header, index);
  std::array<std::byte, kPackTrailerBytes> trailer{};
  store_u64(trailer.data(), checksum.high);
  store_u64(trailer.data() + 8, checksum.low);
  std::memcpy(trailer.data() + 16, kPackEndMagic, sizeof(kPackEndMagic));

  const auto fail = [&](std::string_view what, int error) {
    ::close(m_fd);
    m_fd = -1;
    ::unlink(m_temp_path.c_str());
    throw std::runtime_error(fmt::format("pack {}: {} failed: {}", m_path.string(), what, system_error_text(error)));
  };
  if (!write_all(m_fd, index.data(), index.size()) || !write_all(m_fd, trailer.data(), trailer.size())) {
    fail("write", errno);
  }
  for (std::size_t done = 0; done < header.size();) {
    const ssize_t n = ::pwrite(m_fd, header.data() + done, header.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write", errno);
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(m_fd) != 0) fail("fsync", errno);
  if (::close(m_fd) != 0) {
    m_fd = -1;
    const int error = errno;
    ::unlink(m_temp_path.c_str());
    throw std::runtime_error(fmt::format("pack {}: close failed: {}", m_path.string(), system_error_text(error)));
  }
  m_fd = -1;
  if (::rename(m_temp_path.c_str(), m_path.c_str()) != 0) {
    const int error = errno;
    ::unlink(m_temp_path.c_str());
    throw std::runtime_error(fmt::format("pack {}: rename from {} failed: {}", m_path.string(), m_temp_path.string(),
                                         system_error_text(error)));
  }
  // Make the rename durable; a failure here leaves a complete pack, so it is not an error.
  const std::filesystem::path directory = m_path.parent_path().empty() ? "." : m_path.parent_path();
  const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    (void)::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void write_pack(const std::filesystem::path& path, const std::vector<Entry>& entries) {
  PackWriter writer(path);
  for (const Entry& entry : entries) writer.add(entry);
  writer.commit();
}

// ---------------------------------------------------------------------------------------------
// PackReader

PackReader::PackReader(std::filesystem::path path, int fd, Limits limits, std::vector<PackRecord> records)
    : m_path(std::move(path)), m_fd(fd), m_limits(limits), m_records(std::move(records)) {}

PackReader::~PackReader() {
  if (m_fd >= 0) ::close(m_fd);
}

std::unique_ptr<PackReader> PackReader::open(const std::filesystem::path& path, const Limits& limits) {
  const auto fail = [&](std::string_view why) -> std::runtime_error {
    return std::runtime_error(fmt::format("pack {}: {}", path.string(), why));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(fmt::format("cannot open: {}", system_error_text(errno)));
  struct FdGuard {
    int fd;
    bool keep = false;
    ~FdGuard() {
      if (!keep) ::close(fd);
    }
  } guard{fd};

  struct stat info {};
  if (::fstat(fd, &info) != 0) throw fail(fmt::format("cannot stat: {}", system_error_text(errno)));
  if (!S_ISREG(info.st_mode)) throw fail("not a regular file");
  const auto file_size = static_cast<std::uint64_t>(info.st_size);
  if (file_size < kPackHeaderBytes + kPackTrailerBytes) {
    throw fail(fmt::format("not a kiln pack (truncated: {} bytes, a pack has at least {})", file_size,
                           kPackHeaderBytes + kPackTrailerBytes));
  }

  std::array<std::byte, kPackHeaderBytes> header{};
  if (!pread_all(fd, header.data(), header.size(), 0)) {
    throw fail(fmt::format("cannot read header: {}", errno != 0 ? system_error_text(errno) : "short read"));
  }
  if (std::memcmp(header.data(), kPackMagic, sizeof(kPackMagic)) != 0) throw fail("not a kiln pack (bad magic)");
  const std::uint32_t version = load_u32(header.data() + 8);
  if (version != kPackFormatVersion) {
    throw fail(
        fmt::format("unsupported pack format version {} (this kiln reads version {})", version, kPackFormatVersion));
  }
  const std::uint64_t entry_count = load_u64(header.data() + 16);
  const std::uint64_t index_offset = load_u64(header.data() + 24);
  const bool reserved_zero =
      load_u32(header.data() + 12) == 0 && load_u64(header.data() + 32) == 0 && load_u64(header.data() + 40) == 0;
  if (!reserved_zero) throw fail("corrupt header (reserved fields are not zero)");
  const std::uint64_t room = file_size - kPackHeaderBytes - kPackTrailerBytes;
  if (index_offset < kPackHeaderBytes || index_offset - kPackHeaderBytes > room ||
      entry_count > (room - (index_offset - kPackHeaderBytes)) / kPackRecordBytes ||
      index_offset + entry_count * kPackRecordBytes + kPackTrailerBytes != file_size) {
    throw fail(fmt::format("corrupt header ({} entries, index at {}, but the file has {} bytes)", entry_count,
                           index_offset, file_size));
  }

  std::vector<std::byte> index(entry_count * kPackRecordBytes);
  std::array<std::byte, kPackTrailerBytes> trailer{};
  if (!pread_all(fd, index.data(), index.size(), index_offset) ||
      !pread_all(fd, trailer.data(), trailer.size(), index_offset + index.size())) {
    throw fail(fmt::format("cannot read index: {}", errno != 0 ? system_error_text(errno) : "short read"));
  }
  if (std::memcmp(trailer.data() + 16, kPackEndMagic, sizeof(kPackEndMagic)) != 0) {
    throw fail("corrupt trailer (bad end magic)");
  }
  const Hash128 stored{load_u64(trailer.data()), load_u64(trailer.data() + 8)};
  if (index_checksum(header, index) != stored) throw fail("index checksum mismatch (the pack is damaged)");

  std::vector<PackRecord> records(entry_count);
  for (std::uint64_t i = 0; i < entry_count; ++i) {
    const std::byte* in = index.data() + i * kPackRecordBytes;
    PackRecord& record = records[i];
    record.key = Hash128{load_u64(in), load_u64(in + 8)};
    record.offset = load_u64(in + 16);
    record.length = load_u64(in + 24);
    if (record.offset < kPackHeaderBytes || record.offset > index_offset ||
        record.length > index_offset - record.offset || record.length == 0) {
      throw fail(fmt::format("corrupt index (record {} points outside the entry data)", i));
    }
    if (i > 0 && !key_less(records[i - 1].key, record.key)) {
      throw fail(fmt::format("corrupt index (record {} is out of order or repeats a key)", i));
    }
  }
  guard.keep = true;
  return std::unique_ptr<PackReader>(new PackReader(path, fd, limits, std::move(records)));
}

std::string PackReader::describe() const { return "pack " + m_path.string(); }

std::variant<Entry, ContentError> PackReader::read(const PackRecord& record) const {
  try {
    if (record.length > m_limits.max_file_bytes) {
      return ContentError{fmt::format("entry {} is {} bytes, over the {} byte limit", record.key.hex(), record.length,
                                      m_limits.max_file_bytes)};
    }
    std::vector<std::byte> bytes(record.length);
    if (!pread_all(m_fd, bytes.data(), bytes.size(), record.offset)) {
      return ContentError{fmt::format("cannot read entry {}: {}", record.key.hex(),
                                      errno != 0 ? system_error_text(errno) : "short read")};
    }
    auto parsed = parse(bytes, m_limits);
    if (auto* error = std::get_if<ContentError>(&parsed)) {
      return ContentError{fmt::format("entry {}: {}", record.key.hex(), error->reason)};
    }
    if (std::get<Entry>(parsed).key_hash != record.key) {
      return ContentError{
          fmt::format("entry {}: holds key {}", record.key.hex(), std::get<Entry>(parsed).key_hash.hex())};
    }
    return parsed;
  } catch (const std::bad_alloc&) {
    return ContentError{fmt::format("entry {}: out of memory reading {} bytes", record.key.hex(), record.length)};
  }
}

LookupResult PackReader::get(const Hash128& key, std::string_view canonical_key) {
  LookupResult result;
  try {
    const auto it =
        std::lower_bound(m_records.begin(), m_records.end(), key,
                         [](const PackRecord& record, const Hash128& k) { return key_less(record.key, k); });
    if (it == m_records.end() || it->key != key) return result;
    auto read_result = read(*it);
    if (auto* error = std::get_if<ContentError>(&read_result)) {
      result.outcome = LookupOutcome::io_error;
      result.detail = fmt::format("{}: {}", describe(), error->reason);
      // A pack is read-only, so nothing removes the entry: say so, as local and remote damage are said.
      KILN_LOG(warn, "{}: a damaged entry is not used, the kernel is compiled instead ({})", describe(), error->reason);
      return result;
    }
    Entry& entry = std::get<Entry>(read_result);
    if (entry.canonical_key != canonical_key) {
      result.detail = fmt::format("{}: entry {} holds another request (hash collision)", describe(), key.hex());
      return result;
    }
    result.outcome = LookupOutcome::hit;
    result.entry = std::move(entry);
  } catch (const std::exception& error) {
    result = LookupResult{};
    result.outcome = LookupOutcome::io_error;
    result.detail = fmt::format("{}: {}", describe(), error.what());
  }
  return result;
}

std::unique_ptr<Tier> open_pack(const std::filesystem::path& path) { return PackReader::open(path); }

}  // namespace kiln::cache
