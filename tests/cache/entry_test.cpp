// The entry format: round trip, the grammar's layout, and every malformed input a file can hold.
#include <fmt/format.h>
#include <sys/mman.h>

#include <random>

#include "cache_test_support.hpp"
#include "entry_io.hpp"
#include "kiln/base/xxh3.hpp"

using namespace kiln_test;
using kiln::cache::ContentError;
using kiln::cache::kEntryEpilogueBytes;
using kiln::cache::kEntryFixedBytes;
using kiln::cache::Limits;
using kiln::cache::parse;
using kiln::cache::serialize;

namespace {

void store_u64(std::vector<std::byte>& bytes, std::size_t at, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) bytes[at + static_cast<std::size_t>(i)] = static_cast<std::byte>(value >> (8 * i));
}
void store_u32(std::vector<std::byte>& bytes, std::size_t at, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[at + static_cast<std::size_t>(i)] = static_cast<std::byte>(value >> (8 * i));
}
std::uint64_t load_u64(const std::vector<std::byte>& bytes, std::size_t at) {
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<std::uint64_t>(bytes[at + static_cast<std::size_t>(i)]) << (8 * i);
  return value;
}

/// Recomputes the checksum, so a test can reach the checks behind it.
void fix_checksum(std::vector<std::byte>& bytes) {
  const std::size_t body = bytes.size() - kEntryEpilogueBytes;
  const Hash128 checksum = kiln::cache::hash128(std::span(bytes).first(body), kiln::cache::kChecksumSeed);
  store_u64(bytes, body, checksum.high);
  store_u64(bytes, body + 8, checksum.low);
}

std::string reason(const std::variant<Entry, ContentError>& result) {
  const auto* error = std::get_if<ContentError>(&result);
  return error != nullptr ? error->reason : std::string("(parsed)");
}

/// parse_file over a memory file holding `bytes`.
kiln::cache::detail::FileParseResult parse_via_file(std::span<const std::byte> bytes, const Limits& limits = {}) {
  const int fd = ::memfd_create("kiln-entry", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  REQUIRE(::lseek(fd, 0, SEEK_SET) == 0);
  auto result = kiln::cache::detail::parse_file(fd, bytes.size(), limits, nullptr);
  ::close(fd);
  return result;
}

}  // namespace

TEST_CASE("entry: round trip and layout", "[cache]") {
  const Entry entry = make_entry("roundtrip", 5000);
  const std::vector<std::byte> bytes = serialize(entry);
  const auto parsed = parse(bytes);
  REQUIRE(std::holds_alternative<Entry>(parsed));
  const Entry& back = std::get<Entry>(parsed);
  CHECK(back.vendor == entry.vendor);
  CHECK(back.payload_kind == entry.payload_kind);
  CHECK(back.target == entry.target);
  CHECK(back.compiler == entry.compiler);
  CHECK(back.created_unix == entry.created_unix);
  CHECK(back.key_hash == entry.key_hash);
  CHECK(back.canonical_key == entry.canonical_key);
  CHECK(back.names == entry.names);
  CHECK(back.payload == entry.payload);
  CHECK(back.aux == entry.aux);

  // The grammar in entry.hpp, byte for byte.
  CHECK(std::memcmp(bytes.data(), "KILNENT\x01", 8) == 0);
  CHECK(static_cast<int>(bytes[8]) == 1);
  CHECK(static_cast<int>(bytes[12]) == 1);  // cuda
  CHECK(static_cast<int>(bytes[13]) == 1);  // cubin
  CHECK(load_u64(bytes, 24) == entry.key_hash.high);
  CHECK(load_u64(bytes, 32) == entry.key_hash.low);
  CHECK(load_u64(bytes, 64) == entry.payload.size());
  CHECK(load_u64(bytes, 72) == entry.aux.size());
  CHECK(load_u64(bytes, 80) == bytes.size());
  CHECK(std::memcmp(bytes.data() + bytes.size() - 8, "KILNEND\x01", 8) == 0);
  std::size_t names_len = 0;
  for (const auto& name : entry.names) names_len += 8 + name.expression.size() + name.lowered.size();
  CHECK(bytes.size() == kEntryFixedBytes + entry.target.size() + entry.compiler.size() + entry.canonical_key.size() +
                            names_len + entry.payload.size() + entry.aux.size() + kEntryEpilogueBytes);

  SECTION("the file reader agrees") {
    auto via_file = parse_via_file(bytes);
    REQUIRE(std::holds_alternative<Entry>(via_file));
    CHECK(std::get<Entry>(via_file).payload == entry.payload);
    CHECK(std::get<Entry>(via_file).names == entry.names);
  }
  SECTION("empty payload, no names, big payload") {
    Entry minimal = make_entry("minimal", 0);
    minimal.names.clear();
    minimal.aux.clear();
    CHECK(std::holds_alternative<Entry>(parse(serialize(minimal))));
    const Entry big = make_entry("big", 3 << 20);
    const auto big_bytes = serialize(big);
    CHECK(std::holds_alternative<Entry>(parse(big_bytes)));
    auto via_file = parse_via_file(big_bytes);
    REQUIRE(std::holds_alternative<Entry>(via_file));
    CHECK(std::get<Entry>(via_file).payload == big.payload);
  }
  SECTION("serialize writes the hash of the stored key") {
    Entry wrong = entry;
    wrong.key_hash = Hash128{1, 2};
    const auto reparsed = parse(serialize(wrong));
    REQUIRE(std::holds_alternative<Entry>(reparsed));
    CHECK(std::get<Entry>(reparsed).key_hash == entry.key_hash);
  }
}

TEST_CASE("entry: every truncation and every flipped byte is a content error", "[cache]") {
  const Entry entry = make_entry("small", 300);
  const std::vector<std::byte> bytes = serialize(entry);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const auto result = parse(std::span(bytes).first(n));
    INFO("prefix " << n);
    REQUIRE(std::holds_alternative<ContentError>(result));
    const auto via_file = parse_via_file(std::span(bytes).first(n));
    REQUIRE(std::holds_alternative<ContentError>(via_file));
  }
  CHECK(reason(parse({})) == "empty file (0 bytes)");
  CHECK(reason(parse(std::span(bytes).first(100))).starts_with("truncated"));
  for (std::size_t at = 0; at < bytes.size(); ++at) {
    std::vector<std::byte> damaged = bytes;
    damaged[at] ^= std::byte{0x01};
    INFO("byte " << at);
    REQUIRE(std::holds_alternative<ContentError>(parse(damaged)));
  }
}

TEST_CASE("entry: each check names what is wrong", "[cache]") {
  const Entry entry = make_entry("checks", 1000);
  const std::vector<std::byte> good = serialize(entry);
  auto with = [&good](auto edit) {
    std::vector<std::byte> bytes = good;
    edit(bytes);
    return reason(parse(bytes));
  };
  CHECK(with([](auto& b) { b[0] = std::byte{'X'}; }) == "bad magic: not a kiln cache entry");
  CHECK(with([](auto& b) { store_u32(b, 8, 2); }) == "format version 2, this build reads version 1");
  CHECK(with([](auto& b) { b[12] = std::byte{7}; }) == "unknown vendor 7");
  CHECK(with([](auto& b) { b[13] = std::byte{0}; }) == "unknown payload kind 0");
  CHECK(with([](auto& b) { b[14] = std::byte{1}; }) == "reserved header fields are not zero");
  CHECK(with([](auto& b) { store_u32(b, 40, 5000); }) == "target length 5000 exceeds the limit 4096");
  CHECK(with([](auto& b) { store_u32(b, 56, 1000000); }) == "names count 1000000 exceeds the limit 65536");
  CHECK(with([](auto& b) { store_u32(b, 56, 100); }).starts_with("names length"));
  // Sizes far beyond the file are refused before anything is allocated.
  CHECK(with([](auto& b) { store_u64(b, 64, 1ULL << 40); }) ==
        "payload length 1099511627776 exceeds the limit 536870912");
  CHECK(with([](auto& b) { store_u64(b, 72, ~0ULL); }).starts_with("aux length"));
  CHECK(with([](auto& b) { store_u64(b, 64, 1ULL << 20); }).starts_with("header lengths add up to"));
  CHECK(with([](auto& b) {
          store_u64(b, 64, load_u64(b, 64) + 100);
          store_u64(b, 80, load_u64(b, 80) + 100);
        }).starts_with("truncated: "));
  CHECK(with([](auto& b) {
          store_u64(b, 64, load_u64(b, 64) - 100);
          store_u64(b, 80, load_u64(b, 80) - 100);
        }) == "100 trailing bytes after the entry");
  CHECK(with([](auto& b) { b[b.size() - 1] = std::byte{0}; }).starts_with("bad end magic"));
  CHECK(with([](auto& b) { b[200] ^= std::byte{1}; }) == "checksum mismatch");
  // Behind a valid checksum: the names list and the key hash.
  CHECK(with([](auto& b) {
          const std::size_t names_at =
              kEntryFixedBytes + 5 + 10 + static_cast<std::size_t>(load_u64(b, 48) & 0xffffffff);
          store_u32(b, names_at, 0xfffffff0u);
          fix_checksum(b);
        }).starts_with("names list"));
  CHECK(with([](auto& b) {
          b[kEntryFixedBytes + 5 + 10 + 20] ^= std::byte{1};  // a byte of the canonical key
          fix_checksum(b);
        }) == "key hash does not match the stored canonical key");

  Limits tight;
  tight.max_payload_bytes = 100;
  CHECK(reason(parse(good, tight)) == "payload length 1000 exceeds the limit 100");
  tight = Limits{};
  tight.max_file_bytes = 1000;
  CHECK(reason(parse(good, tight)).starts_with("file length"));
  tight = Limits{};
  tight.max_name_bytes = 3;
  CHECK(reason(parse(good, tight)).starts_with("names list"));
}

TEST_CASE("entry: the file reader compares the expected key", "[cache]") {
  const Entry entry = make_entry("expected", 700);
  const Entry other = make_entry("other", 700);
  const std::vector<std::byte> bytes = serialize(entry);
  const int fd = ::memfd_create("kiln-entry", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  auto parse_expecting = [&](const Entry& wanted) {
    REQUIRE(::lseek(fd, 0, SEEK_SET) == 0);
    const kiln::cache::detail::ExpectedKey expected{wanted.key_hash, wanted.canonical_key};
    return kiln::cache::detail::parse_file(fd, bytes.size(), {}, &expected);
  };
  CHECK(std::holds_alternative<Entry>(parse_expecting(entry)));
  const auto mismatch = parse_expecting(other);
  REQUIRE(std::holds_alternative<ContentError>(mismatch));
  CHECK(std::get<ContentError>(mismatch).reason.starts_with("key mismatch"));
  ::close(fd);
}

TEST_CASE("entry: random and mutated bytes never crash the parser", "[cache]") {
  const std::vector<std::byte> good = serialize(make_entry("mutated", 200));
  std::mt19937_64 random(42);
  std::size_t accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::byte> bytes = good;
    const int edits = 1 + static_cast<int>(random() % 6);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = random() % bytes.size();
      switch (random() % 4) {
        case 0:
          bytes[at] = static_cast<std::byte>(random());
          break;
        case 1:
          bytes.resize(at);
          break;
        case 2:
          store_u32(bytes, std::min<std::size_t>(at, bytes.size() - 4), static_cast<std::uint32_t>(random()));
          break;
        default:
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::byte>(random()));
          break;
      }
      if (bytes.size() < 8) bytes.resize(8);
    }
    if (random() % 2 == 0 && bytes.size() > kEntryEpilogueBytes) fix_checksum(bytes);
    if (std::holds_alternative<Entry>(parse(bytes))) ++accepted;
  }
  UNSCOPED_INFO(accepted << " of 20000 mutated entries still parsed");
  CHECK(accepted < 20000);
}

TEST_CASE("xxh3: the AVX-512, AVX2 and baseline paths give the same hashes", "[cache]") {
  UNSCOPED_INFO("AVX-512 on this CPU: " << kiln::cache::detail::xxh3_cpu_has_avx512());
  std::vector<unsigned char> data(300000);
  std::mt19937 random(5);
  for (auto& byte : data) byte = static_cast<unsigned char>(random());
  for (std::size_t size : {0, 1, 16, 17, 128, 129, 240, 241, 1024, 1025, 4096, 100000, 300000}) {
    INFO("size " << size);
    const Hash128 baseline = kiln::cache::detail::xxh3_128_baseline(data.data(), size, 77);
    CHECK(kiln::cache::detail::xxh3_128_avx2(data.data(), size, 77) == baseline);
    if (kiln::cache::detail::xxh3_cpu_has_avx512()) {
      CHECK(kiln::cache::detail::xxh3_128_avx512(data.data(), size, 77) == baseline);
    }
    CHECK(kiln::cache::detail::xxh3_128(data.data(), size, 77) == baseline);
    // In pieces of uneven sizes, through the dispatch.
    kiln::cache::detail::Xxh3Stream stream(77);
    for (std::size_t at = 0; at < size;) {
      const std::size_t piece = std::min<std::size_t>(size - at, 1 + random() % 5000);
      stream.update(data.data() + at, piece);
      at += piece;
    }
    CHECK(stream.digest() == baseline);
  }
}

// ---- the two file read paths (one read() for small entries, fixed part + readv() for large ones) ------

namespace {

/// parse_file over a memory file holding `bytes`, told the file is `declared` bytes long.
kiln::cache::detail::FileParseResult parse_via_file_declared(
    std::span<const std::byte> bytes, std::uint64_t declared,
    const kiln::cache::detail::ExpectedKey* expected = nullptr) {
  const int fd = ::memfd_create("kiln-entry", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  REQUIRE(::lseek(fd, 0, SEEK_SET) == 0);
  auto result = kiln::cache::detail::parse_file(fd, declared, {}, expected);
  ::close(fd);
  return result;
}

std::string file_reason(const kiln::cache::detail::FileParseResult& result) {
  if (const auto* error = std::get_if<ContentError>(&result)) return error->reason;
  if (const auto* failure = std::get_if<kiln::cache::detail::IoFailure>(&result)) return "I/O: " + failure->what;
  return "(parsed)";
}

}  // namespace

TEST_CASE("entry: small and large entries read from a file classify every damage as parse() does", "[cache]") {
  // 20 KB is read whole (one read into the per-thread buffer); 300 KB is over kWholeReadBytes.
  for (const std::size_t payload : {std::size_t{20000}, std::size_t{300000}}) {
    const Entry entry = make_entry("paths", payload);
    const std::vector<std::byte> good = serialize(entry);
    INFO("file of " << good.size() << " bytes");
    REQUIRE((good.size() > kiln::cache::detail::kWholeReadBytes) == (payload > 100000));
    {
      const auto read = parse_via_file_declared(good, good.size());
      REQUIRE(std::holds_alternative<Entry>(read));
      const Entry& back = std::get<Entry>(read);
      CHECK(back.payload == entry.payload);
      CHECK(back.aux == entry.aux);
      CHECK(back.names == entry.names);
      CHECK(back.canonical_key == entry.canonical_key);
      CHECK(back.target == entry.target);
      CHECK(back.compiler == entry.compiler);
      CHECK(back.key_hash == entry.key_hash);
    }
    const std::size_t payload_at = good.size() - kEntryEpilogueBytes - entry.aux.size() - entry.payload.size();
    const std::size_t names_at = payload_at - 8 * entry.names.size() - 2 * std::string("paths").size() -
                                 std::string("paths<float>").size() - std::string("_Z3fooIfEvv").size();
    // Every damage: the file reader gives the very reason parse() gives.
    std::vector<std::size_t> flips = {0,
                                      8,
                                      12,
                                      13,
                                      14,
                                      20,
                                      30,
                                      40,
                                      48,
                                      56,
                                      64,
                                      72,
                                      80,
                                      90,
                                      96,
                                      100,
                                      150,
                                      names_at,
                                      names_at + 5,
                                      payload_at,
                                      payload_at + payload / 2,
                                      payload_at + payload - 1,
                                      good.size() - kEntryEpilogueBytes - 1,
                                      good.size() - kEntryEpilogueBytes,
                                      good.size() - 9,
                                      good.size() - 1};
    for (const std::size_t at : flips) {
      std::vector<std::byte> bytes = good;
      bytes[at] ^= std::byte{0x21};
      INFO("byte " << at);
      const std::string expected = reason(parse(bytes));
      CHECK(expected != "(parsed)");
      CHECK(file_reason(parse_via_file_declared(bytes, bytes.size())) == expected);
      fix_checksum(bytes);  // reach the checks behind the checksum too
      CHECK(file_reason(parse_via_file_declared(bytes, bytes.size())) == reason(parse(bytes)));
    }
    for (const std::size_t keep : {std::size_t{0}, std::size_t{50}, std::size_t{119}, std::size_t{200}, payload_at,
                                   good.size() / 2, good.size() - 1}) {
      INFO("truncated to " << keep);
      const auto cut = std::span(good).first(keep);
      const std::string expected = reason(parse(cut));
      CHECK(expected != "(parsed)");
      CHECK(file_reason(parse_via_file_declared(cut, keep)) == expected);
      // A file shorter than the size it was opened with (cut while being read): a content error.
      if (keep >= 120) {
        CHECK(file_reason(parse_via_file_declared(cut, good.size())).starts_with("truncated while reading"));
      }
    }
    std::vector<std::byte> longer = good;
    longer.resize(good.size() + 3);
    CHECK(file_reason(parse_via_file_declared(longer, longer.size())) == "3 trailing bytes after the entry");

    // The key asked for is compared in place; another key is a content error naming both.
    const Entry other = make_entry("other", payload);
    const kiln::cache::detail::ExpectedKey same{entry.key_hash, entry.canonical_key};
    const kiln::cache::detail::ExpectedKey different{other.key_hash, other.canonical_key};
    CHECK(std::holds_alternative<Entry>(parse_via_file_declared(good, good.size(), &same)));
    CHECK(file_reason(parse_via_file_declared(good, good.size(), &different)).starts_with("key mismatch"));
    const kiln::cache::detail::ExpectedKey same_hash_other_key{entry.key_hash, other.canonical_key};
    CHECK(file_reason(parse_via_file_declared(good, good.size(), &same_hash_other_key)).starts_with("key mismatch"));
  }
}

TEST_CASE("entry: a failing read() is an I/O failure on both read paths, never a content error", "[cache]") {
  // read() on a directory fails (EISDIR): what a disk error looks like to the parser.
  const int fd = ::open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  for (const std::uint64_t size : {std::uint64_t{4000}, std::uint64_t{400000}}) {
    INFO("declared size " << size);
    const auto result = kiln::cache::detail::parse_file(fd, size, {}, nullptr);
    REQUIRE(std::holds_alternative<kiln::cache::detail::IoFailure>(result));
    CHECK(std::get<kiln::cache::detail::IoFailure>(result).error == EISDIR);
  }
  ::close(fd);
}

TEST_CASE("entry: parse_header reads the header with parse()'s checks, and only the header", "[cache]") {
  using kiln::cache::EntryHeaderView;
  using kiln::cache::detail::HeaderParts;
  using kiln::cache::detail::NeedBytes;
  const Entry entry = make_entry("header", 3000);
  const std::vector<std::byte> good = serialize(entry);
  const std::size_t payload_at = good.size() - kEntryEpilogueBytes - entry.aux.size() - entry.payload.size();
  const auto header = [&](std::span<const std::byte> prefix, HeaderParts parts, std::uint64_t size) {
    return kiln::cache::detail::parse_header(prefix, size, parts, {});
  };

  SECTION("views of a good entry") {
    const auto all = header(good, HeaderParts::all, good.size());
    REQUIRE(std::holds_alternative<EntryHeaderView>(all));
    const EntryHeaderView& view = std::get<EntryHeaderView>(all);
    CHECK(view.vendor == entry.vendor);
    CHECK(view.payload_kind == entry.payload_kind);
    CHECK(view.created_unix == entry.created_unix);
    CHECK(view.key_hash == entry.key_hash);
    CHECK(view.target == entry.target);
    CHECK(view.compiler == entry.compiler);
    CHECK(view.canonical_key == entry.canonical_key);
    CHECK(view.payload_bytes == entry.payload.size());
    CHECK(view.aux_bytes == entry.aux.size());
    CHECK(view.total_bytes == good.size());
    std::vector<kiln::cache::LoweredName> names;
    view.for_each_name([&](std::string_view e, std::string_view l) {
      names.push_back({std::string(e), std::string(l)});
    });
    CHECK(names == entry.names);
    // Exactly the header is enough; the texts need even less.
    CHECK(std::holds_alternative<EntryHeaderView>(
        header(std::span(good).first(payload_at), HeaderParts::all, good.size())));
    const std::size_t texts_end = kEntryFixedBytes + entry.target.size() + entry.compiler.size();
    const auto texts = header(std::span(good).first(texts_end), HeaderParts::texts, good.size());
    REQUIRE(std::holds_alternative<EntryHeaderView>(texts));
    CHECK(std::get<EntryHeaderView>(texts).target == entry.target);
    CHECK(std::get<EntryHeaderView>(texts).canonical_key.empty());
    CHECK(std::get<EntryHeaderView>(texts).names_count == 0);
  }
  SECTION("a short prefix asks for what it needs, after the lengths were checked") {
    const auto none = header({}, HeaderParts::all, good.size());
    REQUIRE(std::holds_alternative<NeedBytes>(none));
    CHECK(std::get<NeedBytes>(none).bytes == kEntryFixedBytes);
    const auto fixed_only = header(std::span(good).first(kEntryFixedBytes), HeaderParts::all, good.size());
    REQUIRE(std::holds_alternative<NeedBytes>(fixed_only));
    CHECK(std::get<NeedBytes>(fixed_only).bytes == payload_at);
    const auto fixed_texts = header(std::span(good).first(kEntryFixedBytes), HeaderParts::texts, good.size());
    REQUIRE(std::holds_alternative<NeedBytes>(fixed_texts));
    CHECK(std::get<NeedBytes>(fixed_texts).bytes == kEntryFixedBytes + entry.target.size() + entry.compiler.size());
    // Hostile lengths are refused, not asked for.
    std::vector<std::byte> hostile = good;
    store_u32(hostile, 48, 0x7fffffff);
    CHECK(std::holds_alternative<ContentError>(
        header(std::span(hostile).first(kEntryFixedBytes), HeaderParts::all, hostile.size())));
  }
  SECTION("damage in the header: the reason parse() gives") {
    for (std::size_t at = 0; at < payload_at; ++at) {
      std::vector<std::byte> bytes = good;
      bytes[at] ^= std::byte{0x01};
      fix_checksum(bytes);  // so parse() reaches the same check parse_header makes
      INFO("byte " << at);
      const std::string expected = reason(parse(bytes));
      const auto result = header(bytes, HeaderParts::all, bytes.size());
      if (expected == "(parsed)") {
        CHECK(std::holds_alternative<EntryHeaderView>(result));
      } else {
        REQUIRE(std::holds_alternative<ContentError>(result));
        CHECK(std::get<ContentError>(result).reason == expected);
      }
    }
    for (std::size_t keep = 0; keep < good.size(); keep += 97) {
      INFO("truncated to " << keep);
      const auto cut = std::span(good).first(keep);
      const auto result = header(cut, HeaderParts::all, keep);
      REQUIRE(std::holds_alternative<ContentError>(result));
      CHECK(std::get<ContentError>(result).reason == reason(parse(cut)));
    }
  }
  SECTION("the payload, aux and checksum are not read: only a whole-entry read finds damage there") {
    std::vector<std::byte> bytes = good;
    bytes[payload_at + 10] ^= std::byte{0x01};
    CHECK(reason(parse(bytes)) == "checksum mismatch");
    CHECK(std::holds_alternative<EntryHeaderView>(header(bytes, HeaderParts::all, bytes.size())));
  }
}

TEST_CASE("entry: an LTO-IR payload must carry LTO-IR's signature, under CUDA, without aux", "[cache][ltoir]") {
  // Payloads of 1 KB and 1 MB: the second is read by the large-entry reader (parse_file's readv path).
  for (const std::size_t size : {std::size_t{1024}, std::size_t{1} << 20}) {
    INFO("payload " << size);
    Entry entry = make_entry("ltoir", 10);
    entry.vendor = kiln::Vendor::cuda;
    entry.payload_kind = kiln::PayloadKind::ltoir;
    entry.target = "lto_90";
    entry.aux.clear();
    entry.payload.assign(size, std::byte{0x33});
    std::memcpy(entry.payload.data(), kiln::cache::kLtoIrMagic, sizeof(kiln::cache::kLtoIrMagic));
    const auto both = [](const Entry& e) {
      const std::vector<std::byte> bytes = serialize(e);
      const std::string in_memory = reason(parse(bytes));
      const auto via_file = parse_via_file(bytes);
      const auto* error = std::get_if<ContentError>(&via_file);
      CHECK((error != nullptr ? error->reason : std::string("(parsed)")) == in_memory);
      return in_memory;
    };
    CHECK(both(entry) == "(parsed)");
    const auto parsed = parse(serialize(entry));
    REQUIRE(std::holds_alternative<Entry>(parsed));
    CHECK(std::get<Entry>(parsed).payload_kind == kiln::PayloadKind::ltoir);

    Entry unsigned_ir = entry;
    unsigned_ir.payload[3] = std::byte{0x7e};
    CHECK(both(unsigned_ir) == fmt::format("the LTO-IR payload ({} bytes) does not start with LTO-IR's signature", size));
    Entry hip = entry;
    hip.vendor = kiln::Vendor::hip;
    CHECK(both(hip) == "an LTO-IR payload under vendor hip (LTO-IR is NVIDIA's)");
    Entry with_aux = entry;
    with_aux.aux.assign(3, std::byte{0});
    CHECK(both(with_aux) == "an LTO-IR entry with 3 aux bytes (it has none)");
    // The same bytes under another kind (and that kind's target) are not judged by the entry format.
    Entry as_cubin = unsigned_ir;
    as_cubin.payload_kind = kiln::PayloadKind::cubin;
    as_cubin.target = "sm_90";
    CHECK(both(as_cubin) == "(parsed)");
  }
  // The magic alone is no LTO-IR: its header is at least kLtoIrMinBytes.
  Entry stub = make_entry("ltoir-stub", 10, "lto_90");
  stub.vendor = kiln::Vendor::cuda;
  stub.payload_kind = kiln::PayloadKind::ltoir;
  stub.aux.clear();
  stub.payload.assign(kiln::cache::kLtoIrMinBytes - 1, std::byte{0});
  std::memcpy(stub.payload.data(), kiln::cache::kLtoIrMagic, sizeof(kiln::cache::kLtoIrMagic));
  CHECK(reason(parse(serialize(stub))).find("LTO-IR's signature") != std::string::npos);
  // Kinds up to 5 (blob) are known; 6 is not.
  std::vector<std::byte> bytes = serialize(make_entry("kinds", 100));
  bytes[13] = std::byte{6};
  CHECK(reason(parse(bytes)) == "unknown payload kind 6");
}

TEST_CASE("store: put refuses an LTO-IR entry its readers would refuse", "[cache][ltoir]") {
  kiln::test::TempDir dir;
  Store store(store_config(dir.path()));
  Entry entry = make_entry("ltoir-put", 10, "lto_90");
  entry.vendor = kiln::Vendor::cuda;
  entry.payload_kind = kiln::PayloadKind::ltoir;
  entry.aux.clear();
  entry.payload.assign(256, std::byte{0});
  CHECK_FALSE(store.put(entry));
  CHECK_THAT(store.last_put_error(), Catch::Contains("LTO-IR's signature"));
  std::memcpy(entry.payload.data(), kiln::cache::kLtoIrMagic, sizeof(kiln::cache::kLtoIrMagic));
  REQUIRE(store.put(entry));
  const auto found = store.get(entry.key_hash, entry.canonical_key);
  REQUIRE(found.outcome == LookupOutcome::hit);
  CHECK(found.entry->payload == entry.payload);
}

// Hardening issue, 7: an entry's kind was not checked against its target: an lto_90 entry relabelled PTX
// was served as PTX (and passed verify). The target says the kind and the vendor; a mismatch is damage.
TEST_CASE("entry: the payload kind and vendor must be the ones the stored target makes", "[cache]") {
  struct Case {
    const char* target;
    kiln::Vendor vendor;
    kiln::PayloadKind kind;
  };
  const std::vector<Case> made = {{"sm_90", kiln::Vendor::cuda, kiln::PayloadKind::cubin},
                                  {"sm_90a", kiln::Vendor::cuda, kiln::PayloadKind::cubin},
                                  {"compute_90", kiln::Vendor::cuda, kiln::PayloadKind::ptx},
                                  {"lto_90", kiln::Vendor::cuda, kiln::PayloadKind::ltoir},
                                  {"gfx90a", kiln::Vendor::hip, kiln::PayloadKind::amdgpu_code_object},
                                  {"gfx90a:sramecc+:xnack-", kiln::Vendor::hip, kiln::PayloadKind::amdgpu_code_object},
                                  {"", kiln::Vendor::none, kiln::PayloadKind::blob}};
  const auto entry_of = [](const Case& c, kiln::PayloadKind kind, kiln::Vendor vendor) {
    Entry entry = make_entry(std::string("kinds-") + c.target, 10, c.target);
    entry.vendor = vendor;
    entry.payload_kind = kind;
    entry.aux.clear();
    entry.payload.assign(256, std::byte{0x42});
    std::memcpy(entry.payload.data(), kiln::cache::kLtoIrMagic, sizeof(kiln::cache::kLtoIrMagic));
    return entry;
  };
  for (const Case& c : made) {
    INFO("target '" << c.target << "'");
    CHECK(reason(parse(serialize(entry_of(c, c.kind, c.vendor)))) == "(parsed)");
    for (const Case& other : made) {
      if (other.kind == c.kind) continue;
      INFO("as kind " << static_cast<int>(other.kind));
      // Relabelled: another kind, with the vendor that kind would have (and, apart, with the right vendor).
      for (const kiln::Vendor vendor : {other.vendor, c.vendor}) {
        const Entry relabelled = entry_of(c, other.kind, vendor);
        const std::vector<std::byte> bytes = serialize(relabelled);
        const std::string why = reason(parse(bytes));
        CHECK(why != "(parsed)");
        const auto via_file = parse_via_file(bytes);
        CHECK(std::holds_alternative<ContentError>(via_file));
      }
    }
    // The right kind under another vendor.
    for (const kiln::Vendor vendor : {kiln::Vendor::none, kiln::Vendor::cuda, kiln::Vendor::hip}) {
      if (vendor == c.vendor) continue;
      CHECK(reason(parse(serialize(entry_of(c, c.kind, vendor)))) != "(parsed)");
    }
  }
  // The case the issue found, by its message, and a header read (listings) refuses it too.
  Entry relabelled = entry_of(made[3], kiln::PayloadKind::ptx, kiln::Vendor::cuda);
  const std::vector<std::byte> bytes = serialize(relabelled);
  CHECK(reason(parse(bytes)) == "payload kind ptx, but target lto_90 makes ltoir");
  CHECK(std::holds_alternative<ContentError>(
      kiln::cache::detail::parse_header(bytes, bytes.size(), kiln::cache::detail::HeaderParts::texts, {})));
  // A target no lane makes, and the store refuses to write what its readers refuse.
  CHECK(reason(parse(serialize(entry_of({"vulkan_1", kiln::Vendor::cuda, kiln::PayloadKind::cubin},
                                        kiln::PayloadKind::cubin, kiln::Vendor::cuda)))) ==
        "target vulkan_1 names no output kind (sm_, compute_, lto_ or gfx)");
  kiln::test::TempDir dir;
  Store store(store_config(dir.path()));
  CHECK_FALSE(store.put(relabelled));
  CHECK_THAT(store.last_put_error(), Catch::Contains("target lto_90 makes ltoir"));
}
