// Packs (.kpack): written atomically, validated on open, every entry verified on read; a damaged pack
// is refused with a clear message, a damaged entry is an io_error, never a wrong binary.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/cache/key.hpp"
#include "kiln/cache/pack.hpp"
#include "synthetic_entry.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using namespace kiln::cache;
using kiln::test::TempDir;

/// Entry number `i`: its own key, a payload of 100 + i bytes.
Entry numbered_entry(int i) {
  return kiln::test::make_entry("k" + std::to_string(i), 100 + static_cast<std::size_t>(i));
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_bytes(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string open_error(const fs::path& path) {
  try {
    (void)PackReader::open(path);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(opened)";
}

}  // namespace

TEST_CASE("a pack round-trips: sorted index, hits verified against the canonical key") {
  const TempDir dir;
  std::vector<Entry> entries;
  for (int i = 0; i < 50; ++i) entries.push_back(numbered_entry(i));
  const fs::path path = dir.path() / "a.kpack";
  write_pack(path, entries);
  const auto pack = PackReader::open(path);
  REQUIRE(pack->records().size() == entries.size());
  for (std::size_t i = 1; i < pack->records().size(); ++i) {
    const Hash128& a = pack->records()[i - 1].key;
    const Hash128& b = pack->records()[i].key;
    CHECK((a.high < b.high || (a.high == b.high && a.low < b.low)));
  }
  CHECK(pack->describe() == "pack " + path.string());
  for (const Entry& entry : entries) {
    const LookupResult hit = pack->get(entry.key_hash, entry.canonical_key);
    REQUIRE(hit.outcome == LookupOutcome::hit);
    CHECK(hit.entry->payload == entry.payload);
    CHECK(hit.entry->names == entry.names);
    // Same hash, another request: a collision is a miss, never the other binary.
    CHECK(pack->get(entry.key_hash, "another request").outcome == LookupOutcome::miss);
  }
  CHECK(pack->get(Hash128{1, 2}, "x").outcome == LookupOutcome::miss);
  // No temp file left beside the pack.
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 1);
}

TEST_CASE("a pack writer skips duplicate keys, writes empty packs, and leaves nothing without commit") {
  const TempDir dir;
  {
    PackWriter writer(dir.path() / "dup.kpack");
    CHECK(writer.add(numbered_entry(1)));
    CHECK_FALSE(writer.add(numbered_entry(1)));
    CHECK(writer.add(numbered_entry(2)));
    CHECK(writer.size() == 2);
    writer.commit();
  }
  CHECK(PackReader::open(dir.path() / "dup.kpack")->records().size() == 2);
  write_pack(dir.path() / "empty.kpack", {});
  CHECK(PackReader::open(dir.path() / "empty.kpack")->records().empty());
  {
    PackWriter abandoned(dir.path() / "abandoned.kpack");
    abandoned.add(numbered_entry(3));
  }
  CHECK_FALSE(fs::exists(dir.path() / "abandoned.kpack"));
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 2);
  CHECK_THROWS_WITH(PackWriter(dir.path() / "no" / "dir.kpack"), Catch::Contains("cannot create"));
}

TEST_CASE("opening a damaged pack fails with a message naming the file and the damage") {
  const TempDir dir;
  const fs::path good = dir.path() / "good.kpack";
  write_pack(good, {numbered_entry(1), numbered_entry(2), numbered_entry(3)});
  const std::string bytes = read_bytes(good);
  const fs::path bad = dir.path() / "bad.kpack";

  CHECK_THAT(open_error(dir.path() / "missing.kpack"), Catch::Contains("cannot open"));
  CHECK_THAT(open_error(dir.path()), Catch::Contains("not a regular file"));

  write_bytes(bad, bytes.substr(0, 30));
  CHECK_THAT(open_error(bad), Catch::Contains(bad.string()) && Catch::Contains("truncated"));

  write_bytes(bad, bytes.substr(0, bytes.size() - 1));
  CHECK_THAT(open_error(bad), Catch::Contains("corrupt header"));

  std::string changed = bytes;
  changed[0] = 'X';
  write_bytes(bad, changed);
  CHECK_THAT(open_error(bad), Catch::Contains("bad magic"));

  changed = bytes;
  changed[8] = 9;  // format version
  write_bytes(bad, changed);
  CHECK_THAT(open_error(bad), Catch::Contains("unsupported pack format version 9"));

  changed = bytes;
  changed[bytes.size() - kPackTrailerBytes - 3] ^= 0x10;  // the last index record's length
  write_bytes(bad, changed);
  CHECK_THAT(open_error(bad), Catch::Contains("index checksum mismatch"));

  changed = bytes;
  changed[bytes.size() - 1] = '?';
  write_bytes(bad, changed);
  CHECK_THAT(open_error(bad), Catch::Contains("bad end magic"));

  changed = bytes;
  changed[16] = 100;  // entry count beyond the file
  write_bytes(bad, changed);
  CHECK_THAT(open_error(bad), Catch::Contains("corrupt header"));

  write_bytes(bad, "");
  CHECK_THAT(open_error(bad), Catch::Contains("truncated"));
}

TEST_CASE("a damaged entry inside a valid pack is an io_error on get and a ContentError on read") {
  const TempDir dir;
  const Entry entry = numbered_entry(7);
  const fs::path path = dir.path() / "p.kpack";
  write_pack(path, {entry});
  std::string bytes = read_bytes(path);
  bytes[kPackHeaderBytes + 200] ^= 0x01;  // inside the only entry (the index is untouched)
  write_bytes(path, bytes);
  const auto pack = PackReader::open(path);
  const LookupResult result = pack->get(entry.key_hash, entry.canonical_key);
  CHECK(result.outcome == LookupOutcome::io_error);
  CHECK_FALSE(result.entry.has_value());
  CHECK_THAT(result.detail, Catch::Contains(path.string()));
  const auto read = pack->read(pack->records()[0]);
  REQUIRE(std::holds_alternative<ContentError>(read));
  CHECK_THAT(std::get<ContentError>(read).reason, Catch::Contains(entry.key_hash.hex()));
  // The pack file itself is never modified or removed.
  CHECK(read_bytes(path) == bytes);
}

TEST_CASE("open_pack gives a Tier") {
  const TempDir dir;
  const Entry entry = numbered_entry(4);
  write_pack(dir.path() / "t.kpack", {entry});
  const std::unique_ptr<Tier> tier = open_pack(dir.path() / "t.kpack");
  CHECK(tier->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::hit);
  CHECK_THROWS_AS(open_pack(dir.path() / "none.kpack"), std::runtime_error);
}
