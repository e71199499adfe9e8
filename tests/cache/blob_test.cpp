// Entries under a caller's key (kiln/cache/blob.hpp) over a real store: a round trip in a fresh Storage
// and in a child process, a damaged entry refused and removed, count and clear keeping to one namespace,
// the size cap's evictions, remove, packs, what bad input gets, keys that never meet a compile's, and labels
// (read at every scan depth).
// No compiler, no GPU.
#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache_test_support.hpp"
#include "kiln/cache/blob.hpp"
#include "kiln/cache/pack.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/cache/store.hpp"

using namespace kiln_test;
using kiln::PayloadKind;
using kiln::cache::blob_clear;
using kiln::cache::blob_count;
using kiln::cache::blob_get;
using kiln::cache::blob_key;
using kiln::cache::blob_put;
using kiln::cache::blob_remove;
using kiln::cache::HitOrigin;
using kiln::cache::Storage;
using kiln::cache::StorageConfig;

namespace {

std::span<const std::byte> bytes_of(std::string_view text) { return std::as_bytes(std::span(text)); }

std::string text_of(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

StorageConfig storage_config(const fs::path& root, std::uint64_t max_size = 1ULL << 30) {
  StorageConfig config;
  config.local = store_config(root);
  config.local.max_size = max_size;
  return config;
}

/// The blob's bytes as `storage` finds them, or nullopt on a miss.
std::optional<std::string> get_text(Storage& storage, std::string_view name_space, std::string_view key) {
  auto found = blob_get(storage, name_space, bytes_of(key));
  if (!found) return std::nullopt;
  return text_of(found->entry->payload);
}

/// Some bytes of every value (NULs and high bytes included), `size` long, different for each `seed`.
std::string payload(std::size_t size, unsigned seed) {
  std::string out(size, '\0');
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<char>((i * 131 + seed * 977) % 256);
  return out;
}

}  // namespace

TEST_CASE("a blob round-trips through a fresh Storage and a child process", "[cache][blob]") {
  TempDir dir;
  const std::string key("\x00\x01key\xff", 6);  // a caller's key is bytes, NULs included
  const std::string value = payload(3000, 1);
  {
    Storage storage(storage_config(dir.path()));
    REQUIRE(blob_put(storage, "cuda.core", bytes_of(key), bytes_of(value)));
    CHECK(storage.counters().bytes_written == value.size());
  }
  Storage fresh(storage_config(dir.path()));
  auto found = blob_get(fresh, "cuda.core", bytes_of(key));
  REQUIRE(found);
  CHECK(text_of(found->entry->payload) == value);
  CHECK(found->origin == HitOrigin::local);
  CHECK(found->entry->payload_kind == PayloadKind::blob);
  CHECK(found->entry->vendor == kiln::Vendor::none);
  CHECK(fresh.counters().disk_hits == 1);

  const ChildResult child = run_in_child([&]() -> std::string {
    Storage in_child(storage_config(dir.path()));
    const auto text = get_text(in_child, "cuda.core", key);
    if (!text) return "the child found nothing";
    return *text == value ? "" : "the child read other bytes";
  });
  CHECK(child.failure.empty());
  INFO(child.failure << child.stderr_text);

  // Another namespace, or another key, is another entry.
  CHECK_FALSE(get_text(fresh, "cuda.core2", key));
  CHECK_FALSE(get_text(fresh, "cuda.core", key.substr(0, 5)));
  // An empty key is a key like any other.
  REQUIRE(blob_put(fresh, "cuda.core", {}, bytes_of("empty key")));
  CHECK(get_text(fresh, "cuda.core", "") == "empty key");
}

TEST_CASE("a put replaces the blob under the same key", "[cache][blob]") {
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  REQUIRE(blob_put(storage, "ns", bytes_of("k"), bytes_of("first")));
  REQUIRE(blob_put(storage, "ns", bytes_of("k"), bytes_of("second, longer")));
  CHECK(get_text(storage, "ns", "k") == "second, longer");
  CHECK(blob_count(storage.local(), "ns") == 1);
}

TEST_CASE("a damaged blob is refused, removed, counted and answered as a miss", "[cache][blob]") {
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  const std::string value = payload(2048, 2);
  REQUIRE(blob_put(storage, "ns", bytes_of("key"), bytes_of(value)));
  const fs::path path = storage.local().entry_path(blob_key("ns", bytes_of("key")).hash);
  std::vector<std::byte> bytes = read_bytes(path);
  REQUIRE(bytes.size() > value.size());
  bytes[bytes.size() - 100] ^= std::byte{0x40};  // inside the payload: only the checksum can tell
  write_bytes(path, bytes);

  StderrCapture capture;
  Storage reader(storage_config(dir.path()));
  CHECK_FALSE(blob_get(reader, "ns", bytes_of("key")));
  CHECK(capture.text().find("checksum mismatch") != std::string::npos);
  CHECK_FALSE(fs::exists(path));
  CHECK(reader.counters().corrupt_removed == 1);
  CHECK(reader.counters().disk_hits == 0);
  // It is gone: the next lookup is a plain miss, and a put stores the value again.
  CHECK_FALSE(blob_get(reader, "ns", bytes_of("key")));
  CHECK(reader.counters().corrupt_removed == 1);
  REQUIRE(blob_put(reader, "ns", bytes_of("key"), bytes_of(value)));
  CHECK(get_text(reader, "ns", "key") == value);
}

TEST_CASE("count and clear keep to their namespace", "[cache][blob]") {
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  for (int i = 0; i < 3; ++i) REQUIRE(blob_put(storage, "alpha", bytes_of("k" + std::to_string(i)), bytes_of("a")));
  for (int i = 0; i < 2; ++i) REQUIRE(blob_put(storage, "beta", bytes_of("k" + std::to_string(i)), bytes_of("b")));
  // A namespace that is a prefix of another is a namespace of its own.
  REQUIRE(blob_put(storage, "alph", bytes_of("k0"), bytes_of("c")));
  const Entry compiled = make_entry("a compiled kernel");
  REQUIRE(storage.local().put(compiled));

  CHECK(blob_count(storage.local(), "alpha") == 3);
  CHECK(blob_count(storage.local(), "beta") == 2);
  CHECK(blob_count(storage.local(), "alph") == 1);
  CHECK(blob_count(storage.local(), "gamma") == 0);

  CHECK(blob_clear(storage.local(), "alpha") == 3);
  CHECK(blob_count(storage.local(), "alpha") == 0);
  CHECK_FALSE(get_text(storage, "alpha", "k0"));
  CHECK(blob_count(storage.local(), "beta") == 2);
  CHECK(get_text(storage, "beta", "k1") == "b");
  CHECK(get_text(storage, "alph", "k0") == "c");
  CHECK(storage.local().contains(compiled.key_hash));
  CHECK(blob_clear(storage.local(), "alpha") == 0);
  // The running size total followed the removals: it is what is on disk.
  std::uint64_t on_disk = 0;
  for (const fs::path& file : entry_files(dir.path())) on_disk += fs::file_size(file);
  CHECK(storage.local().size_estimate() == on_disk);
}

TEST_CASE("blobs are evicted under the size cap, least recently used first", "[cache][blob]") {
  TempDir dir;
  constexpr std::uint64_t kCap = 64 * 1024;
  Storage storage(storage_config(dir.path(), kCap));
  constexpr int kCount = 24;
  for (int i = 0; i < kCount; ++i) {
    const std::string key = "k" + std::to_string(i);
    REQUIRE(blob_put(storage, "ns", bytes_of(key), bytes_of(payload(8 * 1024, static_cast<unsigned>(i)))));
    // Older writes look older to the trim (file times are coarse).
    backdate(storage.local().entry_path(blob_key("ns", bytes_of(key)).hash), std::chrono::seconds(3 * 3600 - i * 60));
  }
  CHECK(storage.counters().evictions > 0);
  const std::uint64_t left = blob_count(storage.local(), "ns");
  CHECK(left < kCount);
  CHECK(left == kCount - storage.counters().evictions);
  std::uint64_t on_disk = 0;
  for (const fs::path& file : entry_files(dir.path())) on_disk += fs::file_size(file);
  CHECK(on_disk <= kCap);
  // The newest survived and the oldest went.
  CHECK(get_text(storage, "ns", "k" + std::to_string(kCount - 1)) == payload(8 * 1024, kCount - 1));
  CHECK_FALSE(get_text(storage, "ns", "k0"));
}

TEST_CASE("remove deletes one blob and says whether there was one", "[cache][blob]") {
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  REQUIRE(blob_put(storage, "ns", bytes_of("gone"), bytes_of("x")));
  REQUIRE(blob_put(storage, "ns", bytes_of("kept"), bytes_of("y")));
  CHECK(blob_remove(storage, "ns", bytes_of("gone")));
  CHECK_FALSE(get_text(storage, "ns", "gone"));
  CHECK(get_text(storage, "ns", "kept") == "y");
  CHECK_FALSE(blob_remove(storage, "ns", bytes_of("gone")));
  CHECK_FALSE(blob_remove(storage, "other", bytes_of("kept")));
  CHECK(blob_count(storage.local(), "ns") == 1);
}

TEST_CASE("a blob key never equals a compile key, whatever bytes either holds", "[cache][blob]") {
  const Entry compiled = make_entry("kernel");
  // The caller's key holds the compile's whole canonical key, or just its source: still another key.
  const auto whole = blob_key("ns", bytes_of(compiled.canonical_key));
  CHECK(whole.hash != compiled.key_hash);
  CHECK(whole.canonical != compiled.canonical_key);
  CanonicalKey same_source;  // a compile key whose only varying part holds the blob key's bytes
  same_source.add("format", "1");
  same_source.add("source", "abc");
  const auto blob = blob_key("ns", bytes_of("abc"));
  CHECK(blob.hash != same_source.hash());
  CHECK_FALSE(blob.canonical.starts_with("kiln-key/1\nformat "));
  CHECK(CanonicalKey::parse(blob.canonical).has_value());    // it follows the key grammar
  CHECK(blob.hash == kiln::cache::hash128(blob.canonical));  // and is hashed as every key is

  // In a store holding both, a lookup of either never returns the other.
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  REQUIRE(storage.local().put(compiled));
  CHECK_FALSE(blob_get(storage, "ns", bytes_of(compiled.canonical_key)));
  REQUIRE(blob_put(storage, "ns", bytes_of(compiled.canonical_key), bytes_of("blob bytes")));
  const auto read = storage.local().get(compiled.key_hash, compiled.canonical_key);
  REQUIRE(read.outcome == LookupOutcome::hit);
  CHECK(read.entry->payload == compiled.payload);
  CHECK(get_text(storage, "ns", compiled.canonical_key) == "blob bytes");
  // The CLI names a blob by its namespace; a compile key has none.
  CHECK(kiln::cache::blob_namespace(whole.canonical) == "ns");
  CHECK_FALSE(kiln::cache::blob_namespace(compiled.canonical_key));
}

TEST_CASE("a blob in a mounted pack is found after a local miss and copied into the local store",
          "[cache][blob][pack]") {
  TempDir dir;
  const auto key = blob_key("ns", bytes_of("packed"));
  const fs::path pack = dir / "blobs.kpack";
  kiln::cache::write_pack(pack, {kiln::cache::blob_entry(key, bytes_of("from the pack"))});
  StorageConfig config = storage_config(dir / "cache");
  config.packs = {pack.string()};
  Storage storage(config);
  auto found = blob_get(storage, "ns", bytes_of("packed"));
  REQUIRE(found);
  CHECK(found->origin == HitOrigin::pack);
  CHECK(text_of(found->entry->payload) == "from the pack");
  CHECK(storage.local().contains(key.hash));
  CHECK(blob_count(storage.local(), "ns") == 1);
}

TEST_CASE("bad namespaces, keys and values are refused with a reason", "[cache][blob]") {
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  const auto refused = [&](std::string_view name_space, std::string_view key, std::string_view why) {
    INFO(name_space.size() << " byte namespace, " << key.size() << " byte key");
    CHECK(kiln::cache::blob_key_problem(name_space, bytes_of(key)).value_or("").find(why) != std::string::npos);
    CHECK_THROWS_WITH(blob_put(storage, name_space, bytes_of(key), bytes_of("v")), Catch::Contains(std::string(why)));
    CHECK_THROWS_AS(blob_get(storage, name_space, bytes_of(key)), std::invalid_argument);
    CHECK_THROWS_AS(blob_remove(storage, name_space, bytes_of(key)), std::invalid_argument);
  };
  refused("", "k", "empty");
  refused(std::string_view("a\0b", 3), "k", "NUL");
  refused(std::string(kiln::cache::kMaxBlobNamespaceBytes + 1, 'n'), "k", "namespace is 257 bytes");
  refused("ns", std::string(kiln::cache::kMaxBlobKeyBytes + 1, 'k'), "key is 65537 bytes");
  CHECK_THROWS_AS(blob_count(storage.local(), ""), std::invalid_argument);
  CHECK_THROWS_AS(blob_clear(storage.local(), ""), std::invalid_argument);
  // The limits themselves are allowed.
  CHECK(blob_put(storage, std::string(kiln::cache::kMaxBlobNamespaceBytes, 'n'),
                 bytes_of(std::string(kiln::cache::kMaxBlobKeyBytes, 'k')), bytes_of("v")));
  // A value no reader would take is never written.
  kiln::cache::Limits small;
  small.max_payload_bytes = 4;
  CHECK_THROWS_WITH(kiln::cache::blob_entry(blob_key("ns", {}), bytes_of("12345"), small),
                    Catch::Contains("payload limit of 4"));
  // An entry that says it is a blob but has a vendor or aux is what no writer makes: refused by put and
  // by every reader.
  Entry odd = kiln::cache::blob_entry(blob_key("ns", bytes_of("odd")), bytes_of("v"));
  odd.vendor = kiln::Vendor::cuda;
  CHECK_FALSE(storage.local().put(odd));
  CHECK(storage.local().last_put_error().find("a blob entry under vendor cuda") != std::string::npos);
  odd.vendor = kiln::Vendor::none;
  odd.aux = {std::byte{1}};
  auto parsed = kiln::cache::parse(kiln::cache::serialize(odd));
  REQUIRE(std::holds_alternative<kiln::cache::ContentError>(parsed));
  CHECK(std::get<kiln::cache::ContentError>(parsed).reason.find("aux") != std::string::npos);
}

TEST_CASE("a read-only store serves blobs and stores none", "[cache][blob]") {
  TempDir dir;
  {
    Storage writer(storage_config(dir.path()));
    REQUIRE(blob_put(writer, "ns", bytes_of("k"), bytes_of("v")));
  }
  StorageConfig config = storage_config(dir.path());
  config.local.read_only = true;
  Storage reader(config);
  CHECK(get_text(reader, "ns", "k") == "v");
  CHECK_FALSE(blob_put(reader, "ns", bytes_of("k2"), bytes_of("w")));
  CHECK_FALSE(get_text(reader, "ns", "k2"));
  CHECK_FALSE(blob_remove(reader, "ns", bytes_of("k")));
  CHECK(blob_clear(reader.local(), "ns") == 0);
  CHECK(blob_count(reader.local(), "ns") == 1);
}

TEST_CASE("labels travel in a blob's names list and are read at every scan depth", "[cache][blob]") {
  using kiln::cache::BlobLabel;
  TempDir dir;
  const std::vector<BlobLabel> labels = {{"kernel", "triton_red_fused_1"}, {"target", "sm_90"}, {"file", "k.json"}};
  {
    Storage storage(storage_config(dir.path()));
    REQUIRE(blob_put(storage, "triton", bytes_of("KEY/__grp__k.json"), bytes_of("group"), labels));
    REQUIRE(blob_put(storage, "triton", bytes_of("KEY/plain.so"), bytes_of("so")));
  }
  Storage fresh(storage_config(dir.path()));
  auto found = blob_get(fresh, "triton", bytes_of("KEY/__grp__k.json"));
  REQUIRE(found);
  CHECK(kiln::cache::blob_labels(*found->entry) == labels);
  CHECK(found->entry->target.empty());  // a blob's own target stays empty: the label says it

  // `stats` and `prune --target` scan lanes only; a blob's header is read whole all the same.
  for (const auto depth : {kiln::cache::ScanDepth::lane, kiln::cache::ScanDepth::header}) {
    std::map<std::string, std::string> targets;
    for (unsigned shard = 0; shard < kiln::cache::Store::kShardCount; ++shard) {
      fresh.local().scan_shard(shard, depth, false, [&](const kiln::cache::ScannedEntry& e) {
        REQUIRE(e.header != nullptr);
        const auto file = kiln::cache::blob_label(*e.header, "file");
        targets[std::string(file.value_or("(none)"))] = std::string(kiln::cache::labeled_target(*e.header));
        CHECK(kiln::cache::blob_namespace(e.header->canonical_key) == "triton");
      });
    }
    CHECK(targets == std::map<std::string, std::string>{{"k.json", "sm_90"}, {"(none)", ""}});
  }
}

TEST_CASE("bad labels are refused with a reason and nothing is stored", "[cache][blob]") {
  using kiln::cache::blob_labels_problem;
  using kiln::cache::BlobLabel;
  CHECK_FALSE(blob_labels_problem(std::vector<BlobLabel>{}));
  CHECK_FALSE(blob_labels_problem(std::vector<BlobLabel>{{"a.b-c_D9", ""}}));
  CHECK(blob_labels_problem(std::vector<BlobLabel>{{"", "v"}}).value().find("a name of 0 bytes") != std::string::npos);
  CHECK(blob_labels_problem(std::vector<BlobLabel>{{"a/b", "v"}}).value().find("a/b") != std::string::npos);
  CHECK(blob_labels_problem(std::vector<BlobLabel>{{"a", "1"}, {"a", "2"}}).value().find("twice") != std::string::npos);
  CHECK(blob_labels_problem(std::vector<BlobLabel>{{"a", std::string("x\0y", 3)}}).value().find("NUL") !=
        std::string::npos);
  CHECK(blob_labels_problem(std::vector<BlobLabel>(17, BlobLabel{"a", "v"})).value().find("17 labels") !=
        std::string::npos);
  TempDir dir;
  Storage storage(storage_config(dir.path()));
  CHECK_THROWS_AS(blob_put(storage, "triton", bytes_of("k"), bytes_of("v"), std::vector<BlobLabel>{{"", "v"}}),
                  std::invalid_argument);
  CHECK(blob_count(storage.local(), "triton") == 0);
}
