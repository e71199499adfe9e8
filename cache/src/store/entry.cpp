#include "kiln/cache/entry.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "entry_io.hpp"
#include "kiln/base/hot_path.hpp"
#include "kiln/base/xxh3.hpp"
#include "le_bytes.hpp"
#include "posix_util.hpp"

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

using detail::load_hash;
using detail::load_le;
using detail::load_u32;
using detail::load_u64;
using detail::store_hash;
using detail::store_le;

/// Adds without wrapping; false on overflow.
bool add_size(std::uint64_t& total, std::uint64_t more) noexcept {
  return !__builtin_add_overflow(total, more, &total);
}

using detail::ExpectedKey;
using detail::FileParseResult;
using detail::IoFailure;

ContentError too_long(std::string_view what, std::uint64_t length, std::uint64_t limit) {
  return ContentError{fmt::format("{} {} exceeds the limit {}", what, length, limit)};
}

ContentError truncated_while_reading(std::uint64_t size) {
  return ContentError{fmt::format("truncated while reading: file shorter than its {} bytes", size)};
}

/// The fixed part of an entry, checked against the limits and the file size.
struct Layout {
  Vendor vendor = Vendor::none;
  PayloadKind payload_kind = PayloadKind::cubin;
  std::int64_t created_unix = 0;
  Hash128 key_hash;
  std::uint32_t target_len = 0;
  std::uint32_t compiler_len = 0;
  std::uint32_t canonical_len = 0;
  std::uint32_t names_len = 0;
  std::uint32_t names_count = 0;
  std::uint64_t payload_len = 0;
  std::uint64_t aux_len = 0;
  std::uint64_t total_len = 0;

  /// target + compiler + canonical key + names: the bytes between the fixed part and the payload.
  [[nodiscard]] std::uint64_t variable_bytes() const noexcept {
    return std::uint64_t{target_len} + compiler_len + canonical_len + names_len;
  }
};

/// The variable part, as views (into a buffer holding at least Layout::variable_bytes() bytes).
struct Texts {
  std::string_view target;
  std::string_view compiler;
  std::string_view canonical_key;
  std::string_view names;
};

KILN_HOT Texts split_variable(const Layout& layout, const std::byte* variable) noexcept {
  const char* p = reinterpret_cast<const char*>(variable);
  Texts texts;
  texts.target = std::string_view(p, layout.target_len);
  p += layout.target_len;
  texts.compiler = std::string_view(p, layout.compiler_len);
  p += layout.compiler_len;
  texts.canonical_key = std::string_view(p, layout.canonical_len);
  p += layout.canonical_len;
  texts.names = std::string_view(p, layout.names_len);
  return texts;
}

// ---- the checks, in the grammar's order (entry.hpp); every reader runs exactly these ------------------

/// 1. The size of the input, before anything is read.
KILN_HOT std::optional<ContentError> check_size(std::uint64_t size, const Limits& limits) {
  if (size == 0) return ContentError{"empty file (0 bytes)"};
  if (size < kEntryFixedBytes + kEntryEpilogueBytes) {
    return ContentError{
        fmt::format("truncated: {} bytes, an entry needs at least {}", size, kEntryFixedBytes + kEntryEpilogueBytes)};
  }
  if (size > limits.max_file_bytes) return too_long("file length", size, limits.max_file_bytes);
  return std::nullopt;
}

/// 2. The fixed part (kEntryFixedBytes at `f`) of an entry of `size` bytes: everything is checked before
/// any allocation, so what a reader allocates afterwards is bounded by the size of the input.
KILN_HOT std::variant<Layout, ContentError> check_fixed(const std::byte* f, std::uint64_t size, const Limits& limits) {
  if (std::memcmp(f + field::magic, kEntryMagic, sizeof(kEntryMagic)) != 0) {
    return ContentError{"bad magic: not a kiln cache entry"};
  }
  const std::uint32_t version = load_u32(f + field::format_version);
  if (version != kEntryFormatVersion) {
    return ContentError{fmt::format("format version {}, this build reads version {}", version, kEntryFormatVersion)};
  }
  const auto vendor = static_cast<std::uint8_t>(f[field::vendor]);
  if (vendor > static_cast<std::uint8_t>(kLastVendor)) return ContentError{fmt::format("unknown vendor {}", vendor)};
  const auto kind = static_cast<std::uint8_t>(f[field::payload_kind]);
  if (kind < static_cast<std::uint8_t>(PayloadKind::cubin) || kind > static_cast<std::uint8_t>(PayloadKind::blob)) {
    return ContentError{fmt::format("unknown payload kind {}", kind)};
  }
  if (load_le(f + field::reserved16, 2) != 0 || load_u32(f + field::reserved32) != 0 ||
      load_u64(f + field::reserved64) != 0) {
    return ContentError{"reserved header fields are not zero"};
  }
  Layout l;
  l.vendor = static_cast<Vendor>(vendor);
  l.payload_kind = static_cast<PayloadKind>(kind);
  l.created_unix = static_cast<std::int64_t>(load_u64(f + field::created_unix));
  l.key_hash = load_hash(f + field::key_hash);
  l.target_len = load_u32(f + field::target_len);
  l.compiler_len = load_u32(f + field::compiler_len);
  l.canonical_len = load_u32(f + field::canonical_len);
  l.names_len = load_u32(f + field::names_len);
  l.names_count = load_u32(f + field::names_count);
  l.payload_len = load_u64(f + field::payload_len);
  l.aux_len = load_u64(f + field::aux_len);
  l.total_len = load_u64(f + field::total_len);
  if (l.target_len > limits.max_text_bytes) return too_long("target length", l.target_len, limits.max_text_bytes);
  if (l.compiler_len > limits.max_text_bytes) {
    return too_long("compiler length", l.compiler_len, limits.max_text_bytes);
  }
  if (l.canonical_len > limits.max_canonical_bytes) {
    return ContentError{canonical_key_too_long(l.canonical_len, limits.max_canonical_bytes)};
  }
  if (l.names_count > limits.max_names) return too_long("names count", l.names_count, limits.max_names);
  if (std::uint64_t{l.names_count} * 8 > l.names_len) {
    return ContentError{fmt::format("names length {} cannot hold {} names", l.names_len, l.names_count)};
  }
  if (l.payload_len > limits.max_payload_bytes) {
    return too_long("payload length", l.payload_len, limits.max_payload_bytes);
  }
  if (l.aux_len > limits.max_payload_bytes) return too_long("aux length", l.aux_len, limits.max_payload_bytes);
  std::uint64_t declared = kEntryFixedBytes + kEntryEpilogueBytes;
  if (!add_size(declared, l.target_len) || !add_size(declared, l.compiler_len) ||
      !add_size(declared, l.canonical_len) || !add_size(declared, l.names_len) || !add_size(declared, l.payload_len) ||
      !add_size(declared, l.aux_len)) {
    return ContentError{"header lengths overflow"};
  }
  if (declared != l.total_len) {
    return ContentError{fmt::format("header lengths add up to {} bytes but total_len says {}", declared, l.total_len)};
  }
  if (size < declared) return ContentError{fmt::format("truncated: {} bytes, the header declares {}", size, declared)};
  if (size > declared) return ContentError{fmt::format("{} trailing bytes after the entry", size - declared)};
  return l;
}

/// 3. The end magic, then 4. the checksum (computed by `checksum()` only once the end magic is right).
template <class Checksum>
std::optional<ContentError> check_epilogue(const std::byte* epilogue, Checksum&& checksum) {
  if (std::memcmp(epilogue + 16, kEntryEndMagic, sizeof(kEntryEndMagic)) != 0) {
    return ContentError{"bad end magic (entry cut or overwritten at its end)"};
  }
  if (load_hash(epilogue) != checksum()) return ContentError{"checksum mismatch"};
  return std::nullopt;
}

/// Walks the names list: calls fn(expression, lowered) for each well-formed name, stopping at the first
/// malformed one. Returns how many were well-formed; `rest` keeps what was not consumed.
template <class Fn>
std::uint32_t walk_names(std::string_view& rest, std::uint32_t count, std::uint32_t max_name_bytes, Fn&& fn) {
  auto take = [&](std::string_view& out) -> bool {
    if (rest.size() < 4) return false;
    const std::uint32_t length = load_u32(reinterpret_cast<const std::byte*>(rest.data()));
    if (length > max_name_bytes || length > rest.size() - 4) return false;
    out = rest.substr(4, length);
    rest.remove_prefix(4 + std::size_t{length});
    return true;
  };
  for (std::uint32_t i = 0; i < count; ++i) {
    std::string_view expression;
    std::string_view lowered;
    if (!take(expression) || !take(lowered)) return i;
    fn(expression, lowered);
  }
  return count;
}

/// 5. The names list fills names_len exactly with names_count well-formed names.
KILN_HOT std::optional<ContentError> check_names(std::string_view names, std::uint32_t count, const Limits& limits) {
  const std::uint32_t good = walk_names(names, count, limits.max_name_bytes, [](std::string_view, std::string_view) {});
  if (good < count) return ContentError{fmt::format("names list: entry {} of {} is malformed", good, count)};
  if (!names.empty()) return ContentError{fmt::format("names list: {} unused bytes", names.size())};
  return std::nullopt;
}

/// 6. The stored key: the one asked for (compared in place), else key_hash == hash(canonical key).
KILN_HOT std::optional<ContentError> check_key(const Layout& layout, std::string_view canonical_key,
                                               const ExpectedKey* expected) {
  if (expected != nullptr) {
    if (layout.key_hash != expected->key_hash || canonical_key != expected->canonical_key) {
      return ContentError{fmt::format("key mismatch: the entry holds key {}, the request is {}", layout.key_hash.hex(),
                                      expected->key_hash.hex())};
    }
  } else if (hash128(canonical_key, kKeySeed) != layout.key_hash) {
    return ContentError{"key hash does not match the stored canonical key"};
  }
  return std::nullopt;
}

/// 7. The payload's signature and shape, where the entry format is all that checks it (entry.hpp): LTO-IR,
/// and a blob's vendor and aux.
KILN_HOT std::optional<ContentError> check_payload(const Layout& layout, std::span<const std::byte> payload) {
  if (layout.payload_kind < PayloadKind::ltoir) return std::nullopt;  // the common case, inline
  if (auto problem = payload_problem(layout.vendor, layout.payload_kind, payload, layout.aux_len)) {
    return ContentError{std::move(*problem)};
  }
  return std::nullopt;
}

/// 8. The kind and vendor the stored target makes (the engine's targets: sm_ a CUBIN, compute_ PTX, lto_
/// LTO-IR, all NVIDIA's; gfx an AMDGPU code object; a blob has no target and no vendor). A mismatch is
/// damage: an entry relabelled another kind would be handed to the wrong loader or linker, and a caller
/// asking for the target's kind would be served another. A few bytes of the target, compared in place.
KILN_HOT std::optional<ContentError> check_kind(const Layout& layout, std::string_view target) {
  struct Made {
    std::string_view prefix;
    PayloadKind kind;
    Vendor vendor;
  };
  static constexpr Made kMade[] = {{"sm_", PayloadKind::cubin, Vendor::cuda},
                                   {"compute_", PayloadKind::ptx, Vendor::cuda},
                                   {"lto_", PayloadKind::ltoir, Vendor::cuda},
                                   {"gfx", PayloadKind::amdgpu_code_object, Vendor::hip}};
  if (target.empty()) {
    if (layout.payload_kind == PayloadKind::blob) return std::nullopt;  // its vendor: check_payload
    return ContentError{fmt::format("payload kind {} without a target", to_string(layout.payload_kind))};
  }
  for (const Made& made : kMade) {
    if (!target.starts_with(made.prefix)) continue;
    if (layout.payload_kind != made.kind) {
      return ContentError{fmt::format("payload kind {}, but target {} makes {}", to_string(layout.payload_kind), target,
                                      to_string(made.kind))};
    }
    if (layout.vendor != made.vendor) {
      return ContentError{
          fmt::format("vendor {}, but target {} is {}'s", to_string(layout.vendor), target, to_string(made.vendor))};
    }
    return std::nullopt;
  }
  return ContentError{fmt::format("target {} names no output kind (sm_, compute_, lto_ or gfx)", target)};
}

/// Copies everything but the payload and aux into `entry` (after every check has passed).
KILN_HOT void fill_entry(Entry& entry, const Layout& layout, const Texts& texts, const Limits& limits) {
  entry.vendor = layout.vendor;
  entry.payload_kind = layout.payload_kind;
  entry.created_unix = layout.created_unix;
  entry.key_hash = layout.key_hash;
  entry.target.assign(texts.target);
  entry.compiler.assign(texts.compiler);
  entry.canonical_key.assign(texts.canonical_key);
  entry.names.clear();
  entry.names.reserve(layout.names_count);
  std::string_view names = texts.names;
  walk_names(names, layout.names_count, limits.max_name_bytes,
             [&entry](std::string_view expression, std::string_view lowered) {
               entry.names.push_back(LoweredName{std::string(expression), std::string(lowered)});
             });
}

/// The one parser over bytes in memory (parse(), and parse_file() for entries read whole).
template <class Result>
KILN_HOT Result parse_bytes(std::span<const std::byte> bytes, const Limits& limits, const ExpectedKey* expected) {
  const std::uint64_t size = bytes.size();
  if (auto error = check_size(size, limits)) return std::move(*error);
  auto fixed = check_fixed(bytes.data(), size, limits);
  if (auto* error = std::get_if<ContentError>(&fixed)) return std::move(*error);
  const Layout& layout = std::get<Layout>(fixed);
  const std::byte* variable = bytes.data() + kEntryFixedBytes;
  const std::size_t body = static_cast<std::size_t>(size) - kEntryEpilogueBytes;
  if (auto error =
          check_epilogue(bytes.data() + body, [&] { return detail::xxh3_128(bytes.data(), body, kChecksumSeed); })) {
    return std::move(*error);
  }
  const Texts texts = split_variable(layout, variable);
  if (auto error = check_names(texts.names, layout.names_count, limits)) return std::move(*error);
  if (auto error = check_key(layout, texts.canonical_key, expected)) return std::move(*error);
  const std::byte* payload = variable + layout.variable_bytes();
  const std::byte* aux = payload + layout.payload_len;
  if (auto error = check_payload(layout, {payload, aux})) return std::move(*error);
  if (auto error = check_kind(layout, texts.target)) return std::move(*error);
  // Everything checked: only now copy out (the payload once, with no zero-fill before it).
  Entry entry;
  fill_entry(entry, layout, texts, limits);
  entry.payload.assign(payload, aux);
  entry.aux.assign(aux, aux + layout.aux_len);
  return entry;
}

// ---- reading files --------------------------------------------------------------------------------------

/// A per-thread scratch buffer for parse_file (no allocation per entry read; a thread that has read an
/// entry keeps up to kScratchKeepBytes). Nothing it holds outlives the parse_file call that filled it.
/// The per-thread state is trivially destructible, so a thread's first read registers no thread_local
/// destructor (__cxa_thread_atexit: a loader lock and lazy symbol binding on a process's first
/// request); a pthread key created when libkiln loads frees the buffer when its thread exits.
class ScratchBuffer {
 public:
  /// A buffer of at least `bytes` bytes (contents undefined). Throws std::bad_alloc.
  static std::byte* get(std::size_t bytes) {
    if (bytes > t_capacity) {
      const std::size_t capacity = (std::max<std::size_t>(bytes, 16 * 1024) + 4095) & ~std::size_t{4095};
      release();
      auto fresh = std::make_unique_for_overwrite<std::byte[]>(capacity);
      if (g_key.ok) (void)::pthread_setspecific(g_key.key, fresh.get());
      t_data = fresh.release();
      t_capacity = capacity;
    }
    return t_data;
  }
  /// Lets go of a buffer grown beyond kScratchKeepBytes (by an unusually large header).
  static void trim() noexcept {
    if (t_capacity > kScratchKeepBytes) release();
  }
  static constexpr std::size_t kScratchKeepBytes = 256 * 1024;

 private:
  static void release() noexcept {
    if (g_key.ok) (void)::pthread_setspecific(g_key.key, nullptr);
    delete[] t_data;
    t_data = nullptr;
    t_capacity = 0;
  }
  struct Key {
    pthread_key_t key{};
    bool ok = false;
    // Runs on the exiting thread: its own thread_locals are still there to clear, in case something
    // that runs later in the thread's exit (another key's destructor) reads an entry.
    Key() noexcept {
      ok = ::pthread_key_create(&key, [](void* data) {
             delete[] static_cast<std::byte*>(data);
             t_data = nullptr;
             t_capacity = 0;
           }) == 0;
    }
  };
  static inline Key g_key;  // without a key (none left) a thread's buffer is freed only with the process
  static inline thread_local std::byte* t_data = nullptr;
  static inline thread_local std::size_t t_capacity = 0;
};
static_assert(detail::kWholeReadBytes <= ScratchBuffer::kScratchKeepBytes,
              "a whole-read entry must fit the kept buffer");

using detail::read_exact;
using detail::ReadStatus;

/// Fills every iovec (retrying EINTR and partial reads). Modifies `iov`.
ReadStatus readv_exact(int fd, struct iovec* iov, int count, int& error) noexcept {
  for (;;) {
    while (count > 0 && iov->iov_len == 0) {
      ++iov;
      --count;
    }
    if (count == 0) return ReadStatus::ok;
    const ssize_t n = ::readv(fd, iov, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
      return ReadStatus::io_error;
    }
    if (n == 0) return ReadStatus::short_read;
    auto done = static_cast<std::size_t>(n);
    while (done > 0) {
      const std::size_t take = std::min(done, iov->iov_len);
      iov->iov_base = static_cast<std::byte*>(iov->iov_base) + take;
      iov->iov_len -= take;
      done -= take;
      if (iov->iov_len == 0 && done > 0) {
        ++iov;
        --count;
      }
    }
  }
}

IoFailure read_failure(int error) { return IoFailure{error, fmt::format("read failed: {}", std::strerror(error))}; }

/// An entry too large to read whole into the scratch buffer: the fixed part first, then one readv()
/// straight into the Entry (variable part into scratch, payload and aux into their vectors, epilogue).
/// The checksum runs over the pieces as they lie.
FileParseResult parse_large(int fd, std::uint64_t size, const Limits& limits, const ExpectedKey* expected) {
  std::array<std::byte, kEntryFixedBytes> fixed{};
  int error = 0;
  if (const ReadStatus status = read_exact(fd, fixed.data(), fixed.size(), error); status != ReadStatus::ok) {
    if (status == ReadStatus::io_error) return read_failure(error);
    return truncated_while_reading(size);
  }
  auto checked = check_fixed(fixed.data(), size, limits);
  if (auto* content = std::get_if<ContentError>(&checked)) return std::move(*content);
  const Layout& layout = std::get<Layout>(checked);

  // From here every allocation is bounded by the (verified) file size.
  const auto variable_len = static_cast<std::size_t>(layout.variable_bytes());
  std::byte* variable = ScratchBuffer::get(variable_len);
  Entry entry;
  entry.payload.resize(static_cast<std::size_t>(layout.payload_len));
  entry.aux.resize(static_cast<std::size_t>(layout.aux_len));
  std::array<std::byte, kEntryEpilogueBytes> epilogue{};
  struct iovec pieces[4] = {{variable, variable_len},
                            {entry.payload.data(), entry.payload.size()},
                            {entry.aux.data(), entry.aux.size()},
                            {epilogue.data(), epilogue.size()}};
  if (const ReadStatus status = readv_exact(fd, pieces, 4, error); status != ReadStatus::ok) {
    if (status == ReadStatus::io_error) return read_failure(error);
    return truncated_while_reading(size);
  }
  // One read, then one checksum pass: reading in windows hashed one by one would cost a read() per
  // window (a system call each) to save cache misses on entries that are mostly a few hundred KB.
  auto checksum = [&] {
    detail::Xxh3Stream stream(kChecksumSeed);
    stream.update(fixed.data(), fixed.size());
    stream.update(variable, variable_len);
    stream.update(entry.payload.data(), entry.payload.size());
    stream.update(entry.aux.data(), entry.aux.size());
    return stream.digest();
  };
  if (auto content = check_epilogue(epilogue.data(), checksum)) return std::move(*content);
  const Texts texts = split_variable(layout, variable);
  if (auto content = check_names(texts.names, layout.names_count, limits)) return std::move(*content);
  if (auto content = check_key(layout, texts.canonical_key, expected)) return std::move(*content);
  if (auto content = check_payload(layout, entry.payload)) return std::move(*content);
  if (auto content = check_kind(layout, texts.target)) return std::move(*content);
  fill_entry(entry, layout, texts, limits);
  return entry;
}

}  // namespace

std::optional<std::string> payload_problem(Vendor vendor, PayloadKind kind, std::span<const std::byte> payload,
                                           std::uint64_t aux_bytes) {
  if (kind == PayloadKind::blob) {
    // A caller's bytes under its own key: no lane made them and none runs them, so nothing beside them.
    if (vendor != Vendor::none) return fmt::format("a blob entry under vendor {} (a blob has none)", to_string(vendor));
    if (aux_bytes != 0) return fmt::format("a blob entry with {} aux bytes (it has none)", aux_bytes);
    return std::nullopt;
  }
  if (kind != PayloadKind::ltoir) return std::nullopt;
  if (vendor != maker_of(kind)) {
    return fmt::format("an LTO-IR payload under vendor {} (LTO-IR is NVIDIA's)", to_string(vendor));
  }
  if (aux_bytes != 0) return fmt::format("an LTO-IR entry with {} aux bytes (it has none)", aux_bytes);
  if (!looks_like_ltoir(payload)) {
    return fmt::format("the LTO-IR payload ({} bytes) does not start with LTO-IR's signature", payload.size());
  }
  return std::nullopt;
}

bool looks_like_ltoir(std::span<const std::byte> payload) noexcept {
  return payload.size() >= kLtoIrMinBytes && std::memcmp(payload.data(), kLtoIrMagic, sizeof(kLtoIrMagic)) == 0;
}

void EntryHeaderView::for_each_name(
    const std::function<void(std::string_view expression, std::string_view lowered)>& fn) const {
  std::string_view rest = names_list;
  walk_names(rest, names_count, std::numeric_limits<std::uint32_t>::max(), fn);
}

std::vector<std::byte> serialize(const Entry& entry) {
  // The readers' limit, checked by the writer too: an entry no reader accepts must never be written.
  check_canonical_key(entry.canonical_key);
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
  // The fixed part is built on the stack (GCC cannot see that out.data() is never null here).
  std::array<std::byte, kEntryFixedBytes> fixed{};
  std::byte* f = fixed.data();
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

  std::vector<std::byte> out(fixed.begin(), fixed.end());
  out.resize(static_cast<std::size_t>(total));
  std::byte* p = out.data() + kEntryFixedBytes;
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
  const std::size_t body = static_cast<std::size_t>(p - out.data());
  store_hash(p, detail::xxh3_128(out.data(), body, kChecksumSeed));
  std::memcpy(p + 16, kEntryEndMagic, sizeof(kEntryEndMagic));
  return out;
}

std::variant<Entry, ContentError> parse(std::span<const std::byte> bytes, const Limits& limits) {
  return parse_bytes<std::variant<Entry, ContentError>>(bytes, limits, nullptr);
}

namespace detail {

KILN_HOT FileParseResult parse_file(int fd, std::uint64_t file_size, const Limits& limits,
                                    const ExpectedKey* expected) noexcept {
  try {
    if (auto error = check_size(file_size, limits)) return std::move(*error);
    if (file_size > kWholeReadBytes) {
      struct TrimOnExit {
        ~TrimOnExit() { ScratchBuffer::trim(); }
      } trim_on_exit;
      return parse_large(fd, file_size, limits, expected);
    }
    // One read() into the per-thread buffer, then the memory parser: no allocation but the Entry's own.
    const auto size = static_cast<std::size_t>(file_size);
    std::byte* buffer = ScratchBuffer::get(size);
    int error = 0;
    if (const ReadStatus status = read_exact(fd, buffer, size, error); status != ReadStatus::ok) {
      if (status == ReadStatus::io_error) return read_failure(error);
      return truncated_while_reading(file_size);
    }
    return parse_bytes<FileParseResult>(std::span<const std::byte>(buffer, size), limits, expected);
  } catch (const std::bad_alloc&) {
    return IoFailure{ENOMEM, "out of memory while reading the entry"};
  } catch (const std::exception& error) {
    return IoFailure{EIO, error.what()};
  }
}

HeaderParseResult parse_header(std::span<const std::byte> prefix, std::uint64_t file_size, HeaderParts parts,
                               const Limits& limits) noexcept {
  try {
    if (auto error = check_size(file_size, limits)) return std::move(*error);
    if (prefix.size() < kEntryFixedBytes) return NeedBytes{kEntryFixedBytes};
    auto fixed = check_fixed(prefix.data(), file_size, limits);
    if (auto* error = std::get_if<ContentError>(&fixed)) return std::move(*error);
    const Layout& layout = std::get<Layout>(fixed);
    // A blob's header is read whole at every depth: its labels (names list, blob.hpp) say what it is for the
    // listings that read lanes only (`stats`, `prune --target`), and its canonical key is small (a namespace
    // and a caller's key: at most about 64 KiB), unlike a compile's, which holds the source.
    const bool whole = parts == HeaderParts::all || layout.payload_kind == PayloadKind::blob;
    const std::uint64_t needed =
        kEntryFixedBytes + (whole ? layout.variable_bytes() : std::uint64_t{layout.target_len} + layout.compiler_len);
    if (prefix.size() < needed) return NeedBytes{needed};
    EntryHeaderView view;
    view.vendor = layout.vendor;
    view.payload_kind = layout.payload_kind;
    view.created_unix = layout.created_unix;
    view.key_hash = layout.key_hash;
    view.payload_bytes = layout.payload_len;
    view.aux_bytes = layout.aux_len;
    view.total_bytes = layout.total_len;
    const char* variable = reinterpret_cast<const char*>(prefix.data() + kEntryFixedBytes);
    view.target = std::string_view(variable, layout.target_len);
    view.compiler = std::string_view(variable + layout.target_len, layout.compiler_len);
    if (auto error = check_kind(layout, view.target)) return std::move(*error);
    if (whole) {
      const Texts texts = split_variable(layout, prefix.data() + kEntryFixedBytes);
      if (auto error = check_names(texts.names, layout.names_count, limits)) return std::move(*error);
      if (auto error = check_key(layout, texts.canonical_key, nullptr)) return std::move(*error);
      view.canonical_key = texts.canonical_key;
      view.names_list = texts.names;
      view.names_count = layout.names_count;
    }
    return view;
  } catch (...) {
    return ContentError{"out of memory"};
  }
}

}  // namespace detail
}  // namespace kiln::cache
