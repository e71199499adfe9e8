#include "kiln/cache/entry.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <system_error>

#include "entry_io.hpp"
#include "xxh3.hpp"

namespace kiln::cache {
namespace {

// Offsets of the fixed part (the grammar in entry.hpp).
namespace field {
constexpr std::size_t magic = 0;
constexpr std::size_t format_version = 8;
constexpr std::size_t vendor = 12;
constexpr std::size_t payload_kind = 13;
constexpr std::size_t reserved16 = 14;
constexpr std::size_t created_unix = 16;
constexpr std::size_t key_hash = 24;
constexpr std::size_t target_len = 40;
constexpr std::size_t compiler_len = 44;
constexpr std::size_t canonical_len = 48;
constexpr std::size_t names_len = 52;
constexpr std::size_t names_count = 56;
constexpr std::size_t reserved32 = 60;
constexpr std::size_t payload_len = 64;
constexpr std::size_t aux_len = 72;
constexpr std::size_t total_len = 80;
constexpr std::size_t reserved64 = 88;
}  // namespace field
static_assert(field::reserved64 + 8 == kEntryFixedBytes, "the fixed header is 96 bytes: update the grammar");
static_assert(field::key_hash + 16 == field::target_len && field::total_len + 8 == field::reserved64);
static_assert(16 + sizeof(kEntryEndMagic) == kEntryEpilogueBytes, "epilogue = checksum + end magic");

std::uint64_t load_le(const std::byte* p, std::size_t width) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < width; ++i) value |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return value;
}
std::uint32_t load_u32(const std::byte* p) noexcept { return static_cast<std::uint32_t>(load_le(p, 4)); }
std::uint64_t load_u64(const std::byte* p) noexcept { return load_le(p, 8); }
Hash128 load_hash(const std::byte* p) noexcept { return Hash128{load_u64(p), load_u64(p + 8)}; }

void store_le(std::byte* p, std::uint64_t value, std::size_t width) noexcept {
  for (std::size_t i = 0; i < width; ++i) p[i] = static_cast<std::byte>((value >> (8 * i)) & 0xFF);
}
void store_hash(std::byte* p, const Hash128& h) noexcept {
  store_le(p, h.high, 8);
  store_le(p + 8, h.low, 8);
}

/// Adds without wrapping; false on overflow.
bool add_size(std::uint64_t& total, std::uint64_t more) noexcept {
  return !__builtin_add_overflow(total, more, &total);
}

enum class ReadStatus : std::uint8_t { ok, short_read, io_error };

/// Bytes already in memory.
class MemorySource {
 public:
  explicit MemorySource(std::span<const std::byte> bytes) noexcept : m_bytes(bytes) {}
  ReadStatus read(void* destination, std::size_t count) noexcept {
    if (count > m_bytes.size() - m_offset) return ReadStatus::short_read;
    if (count != 0) std::memcpy(destination, m_bytes.data() + m_offset, count);
    m_offset += count;
    return ReadStatus::ok;
  }
  [[nodiscard]] int error() const noexcept { return 0; }

 private:
  std::span<const std::byte> m_bytes;
  std::size_t m_offset = 0;
};

/// A file read sequentially. Small reads are served from one buffer filled by a single read(); large
/// ones (the payload) go straight into their destination, so a big binary is copied once.
class FileSource {
 public:
  FileSource(int fd, std::uint64_t file_size)
      : m_fd(fd),
        m_capacity(static_cast<std::size_t>(std::min<std::uint64_t>(file_size, kBufferBytes))),
        m_buffer(std::make_unique_for_overwrite<std::byte[]>(m_capacity)) {}

  ReadStatus read(void* destination, std::size_t count) noexcept {
    auto* out = static_cast<std::byte*>(destination);
    while (count > 0) {
      if (m_begin == m_end) {
        if (count >= m_capacity) return read_direct(out, count);
        const ReadStatus status = fill();
        if (status != ReadStatus::ok) return status;
      }
      const std::size_t take = std::min(count, m_end - m_begin);
      std::memcpy(out, m_buffer.get() + m_begin, take);
      m_begin += take;
      out += take;
      count -= take;
    }
    return ReadStatus::ok;
  }
  [[nodiscard]] int error() const noexcept { return m_error; }

 private:
  static constexpr std::uint64_t kBufferBytes = 64 * 1024;

  ReadStatus read_some(std::byte* out, std::size_t count, std::size_t& got) noexcept {
    for (;;) {
      const ssize_t n = ::read(m_fd, out, count);
      if (n >= 0) {
        got = static_cast<std::size_t>(n);
        return n == 0 ? ReadStatus::short_read : ReadStatus::ok;
      }
      if (errno != EINTR) {
        m_error = errno;
        return ReadStatus::io_error;
      }
    }
  }
  ReadStatus fill() noexcept {
    std::size_t got = 0;
    const ReadStatus status = read_some(m_buffer.get(), m_capacity, got);
    m_begin = 0;
    m_end = got;
    return status;
  }
  ReadStatus read_direct(std::byte* out, std::size_t count) noexcept {
    while (count > 0) {
      std::size_t got = 0;
      const ReadStatus status = read_some(out, count, got);
      if (status != ReadStatus::ok) return status;
      out += got;
      count -= got;
    }
    return ReadStatus::ok;
  }

  int m_fd;
  std::size_t m_capacity;
  std::unique_ptr<std::byte[]> m_buffer;
  std::size_t m_begin = 0;
  std::size_t m_end = 0;
  int m_error = 0;
};

using detail::ExpectedKey;
using detail::FileParseResult;
using detail::IoFailure;

ContentError too_long(std::string_view what, std::uint64_t length, std::uint64_t limit) {
  return ContentError{fmt::format("{} {} exceeds the limit {}", what, length, limit)};
}

/// The one parser. `size` is the number of bytes `source` holds.
template <class Source>
FileParseResult parse_from(Source& source, std::uint64_t size, const Limits& limits, const ExpectedKey* expected) {
  if (size == 0) return ContentError{"empty file (0 bytes)"};
  if (size < kEntryFixedBytes + kEntryEpilogueBytes) {
    return ContentError{
        fmt::format("truncated: {} bytes, an entry needs at least {}", size, kEntryFixedBytes + kEntryEpilogueBytes)};
  }
  if (size > limits.max_file_bytes) return too_long("file length", size, limits.max_file_bytes);

  detail::Xxh3Stream checksum(kChecksumSeed);
  std::uint64_t consumed = 0;
  // Reads `count` bytes into `destination`, feeding the checksum. Returns an error to hand back, if any.
  auto read_checked = [&](void* destination, std::size_t count) -> std::optional<FileParseResult> {
    const ReadStatus status = source.read(destination, count);
    if (status == ReadStatus::io_error) {
      return IoFailure{source.error(), fmt::format("read failed: {}", std::strerror(source.error()))};
    }
    if (status == ReadStatus::short_read) {
      return ContentError{fmt::format("truncated while reading: file shorter than its {} bytes", size)};
    }
    checksum.update(destination, count);
    consumed += count;
    return std::nullopt;
  };

  std::array<std::byte, kEntryFixedBytes> fixed{};
  if (auto failure = read_checked(fixed.data(), fixed.size())) return std::move(*failure);
  const std::byte* f = fixed.data();
  if (std::memcmp(f + field::magic, kEntryMagic, sizeof(kEntryMagic)) != 0) {
    return ContentError{"bad magic: not a kiln cache entry"};
  }
  const std::uint32_t version = load_u32(f + field::format_version);
  if (version != kEntryFormatVersion) {
    return ContentError{fmt::format("format version {}, this build reads version {}", version, kEntryFormatVersion)};
  }
  const auto vendor = static_cast<std::uint8_t>(f[field::vendor]);
  if (vendor > static_cast<std::uint8_t>(Vendor::hip)) return ContentError{fmt::format("unknown vendor {}", vendor)};
  const auto kind = static_cast<std::uint8_t>(f[field::payload_kind]);
  if (kind < static_cast<std::uint8_t>(PayloadKind::cubin) ||
      kind > static_cast<std::uint8_t>(PayloadKind::amdgpu_code_object)) {
    return ContentError{fmt::format("unknown payload kind {}", kind)};
  }
  if (load_le(f + field::reserved16, 2) != 0 || load_u32(f + field::reserved32) != 0 ||
      load_u64(f + field::reserved64) != 0) {
    return ContentError{"reserved header fields are not zero"};
  }
  const std::uint32_t target_len = load_u32(f + field::target_len);
  const std::uint32_t compiler_len = load_u32(f + field::compiler_len);
  const std::uint32_t canonical_len = load_u32(f + field::canonical_len);
  const std::uint32_t names_len = load_u32(f + field::names_len);
  const std::uint32_t names_count = load_u32(f + field::names_count);
  const std::uint64_t payload_len = load_u64(f + field::payload_len);
  const std::uint64_t aux_len = load_u64(f + field::aux_len);
  const std::uint64_t total_len = load_u64(f + field::total_len);
  if (target_len > limits.max_text_bytes) return too_long("target length", target_len, limits.max_text_bytes);
  if (compiler_len > limits.max_text_bytes) return too_long("compiler length", compiler_len, limits.max_text_bytes);
  if (canonical_len > limits.max_canonical_bytes) {
    return too_long("canonical key length", canonical_len, limits.max_canonical_bytes);
  }
  if (names_count > limits.max_names) return too_long("names count", names_count, limits.max_names);
  if (std::uint64_t{names_count} * 8 > names_len) {
    return ContentError{fmt::format("names length {} cannot hold {} names", names_len, names_count)};
  }
  if (payload_len > limits.max_payload_bytes) return too_long("payload length", payload_len, limits.max_payload_bytes);
  if (aux_len > limits.max_payload_bytes) return too_long("aux length", aux_len, limits.max_payload_bytes);
  std::uint64_t declared = kEntryFixedBytes + kEntryEpilogueBytes;
  if (!add_size(declared, target_len) || !add_size(declared, compiler_len) || !add_size(declared, canonical_len) ||
      !add_size(declared, names_len) || !add_size(declared, payload_len) || !add_size(declared, aux_len)) {
    return ContentError{"header lengths overflow"};
  }
  if (declared != total_len) {
    return ContentError{fmt::format("header lengths add up to {} bytes but total_len says {}", declared, total_len)};
  }
  if (size < declared) return ContentError{fmt::format("truncated: {} bytes, the header declares {}", size, declared)};
  if (size > declared) return ContentError{fmt::format("{} trailing bytes after the entry", size - declared)};

  // From here every allocation is bounded by the (verified) file size.
  Entry entry;
  entry.vendor = static_cast<Vendor>(vendor);
  entry.payload_kind = static_cast<PayloadKind>(kind);
  entry.created_unix = static_cast<std::int64_t>(load_u64(f + field::created_unix));
  entry.key_hash = load_hash(f + field::key_hash);
  entry.target.resize(target_len);
  entry.compiler.resize(compiler_len);
  entry.canonical_key.resize(canonical_len);
  std::string names(names_len, '\0');
  entry.payload.resize(static_cast<std::size_t>(payload_len));
  entry.aux.resize(static_cast<std::size_t>(aux_len));
  for (auto [data, count] : {std::pair<void*, std::size_t>{entry.target.data(), target_len},
                             {entry.compiler.data(), compiler_len},
                             {entry.canonical_key.data(), canonical_len},
                             {names.data(), names_len},
                             {entry.payload.data(), entry.payload.size()},
                             {entry.aux.data(), entry.aux.size()}}) {
    if (auto failure = read_checked(data, count)) return std::move(*failure);
  }
  const Hash128 computed = checksum.digest();
  std::array<std::byte, kEntryEpilogueBytes> epilogue{};
  if (auto failure = read_checked(epilogue.data(), epilogue.size())) return std::move(*failure);
  if (std::memcmp(epilogue.data() + 16, kEntryEndMagic, sizeof(kEntryEndMagic)) != 0) {
    return ContentError{"bad end magic (entry cut or overwritten at its end)"};
  }
  if (load_hash(epilogue.data()) != computed) {
    return ContentError{"checksum mismatch"};
  }

  std::string_view rest(names);
  auto take_string = [&](std::string& out) -> bool {
    if (rest.size() < 4) return false;
    const std::uint32_t length = load_u32(reinterpret_cast<const std::byte*>(rest.data()));
    rest.remove_prefix(4);
    if (length > limits.max_name_bytes || length > rest.size()) return false;
    out.assign(rest.substr(0, length));
    rest.remove_prefix(length);
    return true;
  };
  for (std::uint32_t i = 0; i < names_count; ++i) {
    LoweredName name;
    if (!take_string(name.expression) || !take_string(name.lowered)) {
      return ContentError{fmt::format("names list: entry {} of {} is malformed", i, names_count)};
    }
    entry.names.push_back(std::move(name));
  }
  if (!rest.empty()) return ContentError{fmt::format("names list: {} unused bytes", rest.size())};

  if (expected != nullptr) {
    if (entry.key_hash != expected->key_hash || entry.canonical_key != expected->canonical_key) {
      return ContentError{fmt::format("key mismatch: the entry holds key {}, the request is {}", entry.key_hash.hex(),
                                      expected->key_hash.hex())};
    }
  } else if (hash128(entry.canonical_key, kKeySeed) != entry.key_hash) {
    return ContentError{"key hash does not match the stored canonical key"};
  }
  return entry;
}

}  // namespace

std::vector<std::byte> serialize(const Entry& entry) {
  constexpr std::uint64_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();
  std::uint64_t names_len = 0;
  for (const LoweredName& name : entry.names) names_len += 8 + name.expression.size() + name.lowered.size();
  if (entry.target.size() > kMaxU32 || entry.compiler.size() > kMaxU32 || entry.canonical_key.size() > kMaxU32 ||
      names_len > kMaxU32 || entry.names.size() > kMaxU32) {
    throw std::length_error("cache entry field longer than 4 GiB cannot be serialized");
  }
  const std::uint64_t total = kEntryFixedBytes + entry.target.size() + entry.compiler.size() +
                              entry.canonical_key.size() + names_len + entry.payload.size() + entry.aux.size() +
                              kEntryEpilogueBytes;
  std::vector<std::byte> out(static_cast<std::size_t>(total));
  std::byte* f = out.data();
  std::memcpy(f + field::magic, kEntryMagic, sizeof(kEntryMagic));
  store_le(f + field::format_version, kEntryFormatVersion, 4);
  f[field::vendor] = static_cast<std::byte>(entry.vendor);
  f[field::payload_kind] = static_cast<std::byte>(entry.payload_kind);
  store_le(f + field::created_unix, static_cast<std::uint64_t>(entry.created_unix), 8);
  // Always the hash of the stored key, so that what we write is what parse() accepts.
  store_hash(f + field::key_hash, hash128(entry.canonical_key, kKeySeed));
  store_le(f + field::target_len, entry.target.size(), 4);
  store_le(f + field::compiler_len, entry.compiler.size(), 4);
  store_le(f + field::canonical_len, entry.canonical_key.size(), 4);
  store_le(f + field::names_len, names_len, 4);
  store_le(f + field::names_count, entry.names.size(), 4);
  store_le(f + field::payload_len, entry.payload.size(), 8);
  store_le(f + field::aux_len, entry.aux.size(), 8);
  store_le(f + field::total_len, total, 8);

  std::byte* p = f + kEntryFixedBytes;
  auto put_bytes = [&p](const void* data, std::size_t count) {
    if (count != 0) std::memcpy(p, data, count);
    p += count;
  };
  put_bytes(entry.target.data(), entry.target.size());
  put_bytes(entry.compiler.data(), entry.compiler.size());
  put_bytes(entry.canonical_key.data(), entry.canonical_key.size());
  for (const LoweredName& name : entry.names) {
    for (const std::string* text : {&name.expression, &name.lowered}) {
      store_le(p, text->size(), 4);
      p += 4;
      put_bytes(text->data(), text->size());
    }
  }
  put_bytes(entry.payload.data(), entry.payload.size());
  put_bytes(entry.aux.data(), entry.aux.size());
  const std::size_t body = static_cast<std::size_t>(p - f);
  store_hash(p, detail::xxh3_128(f, body, kChecksumSeed));
  std::memcpy(p + 16, kEntryEndMagic, sizeof(kEntryEndMagic));
  return out;
}

std::variant<Entry, ContentError> parse(std::span<const std::byte> bytes, const Limits& limits) {
  MemorySource source(bytes);
  FileParseResult result = parse_from(source, bytes.size(), limits, nullptr);
  if (auto* entry = std::get_if<Entry>(&result)) return std::move(*entry);
  if (auto* error = std::get_if<ContentError>(&result)) return std::move(*error);
  return ContentError{"unreachable: memory read failed"};  // MemorySource reports no I/O errors.
}

namespace detail {

FileParseResult parse_file(int fd, std::uint64_t file_size, const Limits& limits,
                           const ExpectedKey* expected) noexcept {
  try {
    if (file_size > limits.max_file_bytes) return too_long("file length", file_size, limits.max_file_bytes);
    FileSource source(fd, file_size);
    return parse_from(source, file_size, limits, expected);
  } catch (const std::bad_alloc&) {
    return IoFailure{ENOMEM, "out of memory while reading the entry"};
  } catch (const std::exception& error) {
    return IoFailure{EIO, error.what()};
  }
}

}  // namespace detail
}  // namespace kiln::cache
