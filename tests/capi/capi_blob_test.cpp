// The C API's entries under a caller's key (kiln.h, API 6: kiln_blob_*), through kiln.h only: a round
// trip across engines and into a child process, misses, a damaged entry refused and counted, count and
// clear per namespace, eviction under the engine's size cap, remove, handles that outlive their engine,
// the counters, and a clear status for every bad argument; labels (API 7: kiln_blob_put_labeled,
// kiln_blob_get_label) and an engine without a GPU runtime (KILN_ENGINE_NO_RUNTIME). No GPU and no compiler
// needed.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using kiln::test::TempDir;

namespace {

/// An engine on its own cache folder (and size cap); destroyed with the object.
class Engine {
 public:
  explicit Engine(const fs::path& cache, std::uint64_t max_size = 0, std::uint32_t flags = 0) {
    kiln_engine_config config;
    kiln_engine_config_init(&config);
    const std::string dir = cache.string();
    config.cache_dir = dir.c_str();
    config.cache_max_size = max_size;
    config.flags = flags;
    const kiln_status status = kiln_engine_create(&config, &m_engine);
    INFO(kiln_last_error());
    REQUIRE(status == KILN_OK);
  }
  ~Engine() { kiln_engine_destroy(m_engine); }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  operator kiln_engine() const { return m_engine; }  // NOLINT(google-explicit-constructor): reads as the handle

  [[nodiscard]] kiln_stats stats() const {
    kiln_stats stats;
    kiln_stats_init(&stats);
    REQUIRE(kiln_engine_stats(m_engine, &stats) == KILN_OK);
    return stats;
  }

 private:
  kiln_engine m_engine = nullptr;
};

int put(kiln_engine engine, const char* name_space, const std::string& key, const std::string& value) {
  int stored = -1;
  const kiln_status status =
      kiln_blob_put(engine, name_space, key.data(), key.size(), value.data(), value.size(), &stored);
  INFO(kiln_last_error());
  REQUIRE(status == KILN_OK);
  return stored;
}

/// The bytes under (name_space, key), or "<miss>".
std::string get(kiln_engine engine, const char* name_space, const std::string& key, kiln_origin* origin = nullptr) {
  kiln_blob blob = reinterpret_cast<kiln_blob>(std::uintptr_t{1});  // overwritten by every success
  const kiln_status status = kiln_blob_get(engine, name_space, key.data(), key.size(), &blob);
  INFO(kiln_last_error());
  REQUIRE(status == KILN_OK);
  if (blob == nullptr) return "<miss>";
  const void* data = nullptr;
  std::size_t size = 0;
  REQUIRE(kiln_blob_data(blob, &data, &size, origin) == KILN_OK);
  std::string text(static_cast<const char*>(data), size);
  REQUIRE(kiln_blob_destroy(blob) == KILN_OK);
  return text;
}

std::uint64_t count(kiln_engine engine, const char* name_space) {
  std::uint64_t n = 0;
  REQUIRE(kiln_blob_count(engine, name_space, &n) == KILN_OK);
  return n;
}

std::vector<fs::path> entry_files(const fs::path& root) {
  std::vector<fs::path> found;
  if (!fs::exists(root / "v1")) return found;
  for (const auto& item : fs::recursive_directory_iterator(root / "v1")) {
    if (item.path().extension() == ".kiln") found.push_back(item.path());
  }
  return found;
}

/// A call that must fail with `expected` and a message naming `needle`.
void require_refused(kiln_status status, kiln_status expected, const std::string& needle) {
  const std::string message = kiln_last_error();
  INFO(kiln_status_name(status) << ": " << message);
  CHECK(status == expected);
  CHECK(message.find(needle) != std::string::npos);
}

}  // namespace

TEST_CASE("kiln_blob: API version 6", "[capi][blob]") {
  CHECK(KILN_API_VERSION >= 6);
  CHECK(kiln_api_version() == KILN_API_VERSION);
}

TEST_CASE("kiln_blob: a round trip across engines and into a child process", "[capi][blob]") {
  TempDir dir;
  const std::string key("\x01\x00\xfe", 3);
  const std::string value("binary\0value", 12);
  {
    const Engine writer(dir / "cache");
    CHECK(put(writer, "cuda.core", key, value) == 1);
    CHECK(writer.stats().bytes_written == value.size());
  }
  const Engine reader(dir / "cache");
  kiln_origin origin = KILN_ORIGIN_COMPILED;
  CHECK(get(reader, "cuda.core", key, &origin) == value);
  CHECK(origin == KILN_ORIGIN_DISK);
  CHECK(reader.stats().disk_hits == 1);
  CHECK(get(reader, "cuda.core", "other key") == "<miss>");
  CHECK(get(reader, "another namespace", key) == "<miss>");
  CHECK(reader.stats().misses == 0);  // a blob miss reaches no compiler

  std::fflush(nullptr);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // A fresh process: only the disk cache connects it to the writer.
    int ok = 0;
    {
      const Engine in_child(dir / "cache");
      kiln_blob blob = nullptr;
      const void* data = nullptr;
      std::size_t size = 0;
      ok = kiln_blob_get(in_child, "cuda.core", key.data(), key.size(), &blob) == KILN_OK && blob != nullptr &&
           kiln_blob_data(blob, &data, &size, nullptr) == KILN_OK &&
           std::string(static_cast<const char*>(data), size) == value;
      kiln_blob_destroy(blob);
    }
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("kiln_blob: a blob handle owns its bytes and outlives its engine", "[capi][blob]") {
  TempDir dir;
  kiln_blob blob = nullptr;
  {
    const Engine engine(dir / "cache");
    put(engine, "ns", "k", "kept bytes");
    REQUIRE(kiln_blob_get(engine, "ns", "k", 1, &blob) == KILN_OK);
    REQUIRE(blob != nullptr);
  }
  const void* data = nullptr;
  std::size_t size = 0;
  REQUIRE(kiln_blob_data(blob, &data, &size, nullptr) == KILN_OK);
  CHECK(std::string(static_cast<const char*>(data), size) == "kept bytes");
  REQUIRE(kiln_blob_destroy(blob) == KILN_OK);
  require_refused(kiln_blob_data(blob, &data, &size, nullptr), KILN_ERROR_INVALID_HANDLE, "destroyed");
  require_refused(kiln_blob_destroy(blob), KILN_ERROR_INVALID_HANDLE, "destroyed");
}

TEST_CASE("kiln_blob: a damaged entry is a miss, removed and counted", "[capi][blob]") {
  TempDir dir;
  const Engine engine(dir / "cache");
  const std::string value(4000, 'v');
  put(engine, "ns", "k", value);
  const auto files = entry_files(dir / "cache");
  REQUIRE(files.size() == 1);
  {
    std::fstream file(files[0], std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(fs::file_size(files[0]) - 200));
    file.put('X');  // inside the payload
  }
  CHECK(get(engine, "ns", "k") == "<miss>");
  CHECK_FALSE(fs::exists(files[0]));
  CHECK(engine.stats().corrupt_removed == 1);
  CHECK(engine.stats().disk_hits == 0);
}

TEST_CASE("kiln_blob: count, clear and remove keep to their namespace and key", "[capi][blob]") {
  TempDir dir;
  const Engine engine(dir / "cache");
  for (const char* key : {"a", "b", "c"}) put(engine, "one", key, "1");
  for (const char* key : {"a", "b"}) put(engine, "two", key, "2");
  CHECK(count(engine, "one") == 3);
  CHECK(count(engine, "two") == 2);
  CHECK(count(engine, "three") == 0);

  int removed = -1;
  REQUIRE(kiln_blob_remove(engine, "one", "a", 1, &removed) == KILN_OK);
  CHECK(removed == 1);
  REQUIRE(kiln_blob_remove(engine, "one", "a", 1, &removed) == KILN_OK);
  CHECK(removed == 0);
  CHECK(get(engine, "two", "a") == "2");
  CHECK(count(engine, "one") == 2);

  std::uint64_t cleared = 0;
  REQUIRE(kiln_blob_clear(engine, "one", &cleared) == KILN_OK);
  CHECK(cleared == 2);
  CHECK(count(engine, "one") == 0);
  CHECK(count(engine, "two") == 2);
  REQUIRE(kiln_blob_clear(engine, "one", nullptr) == KILN_OK);  // the out-parameter is optional
}

TEST_CASE("kiln_blob: the engine's size cap evicts blobs", "[capi][blob]") {
  TempDir dir;
  constexpr std::uint64_t kCap = 48 * 1024;
  const Engine engine(dir / "cache", kCap);
  for (int i = 0; i < 20; ++i)
    put(engine, "ns", "key" + std::to_string(i), std::string(6000, static_cast<char>('a' + i)));
  CHECK(engine.stats().evictions > 0);
  CHECK(count(engine, "ns") < 20);
  std::uint64_t on_disk = 0;
  for (const fs::path& file : entry_files(dir / "cache")) on_disk += fs::file_size(file);
  CHECK(on_disk <= kCap);
  CHECK(get(engine, "ns", "key19") == std::string(6000, static_cast<char>('a' + 19)));  // the newest stays
}

TEST_CASE("kiln_blob: a read-only or disabled cache stores nothing and fails no call", "[capi][blob]") {
  TempDir dir;
  kiln_engine_config config;
  kiln_engine_config_init(&config);
  const std::string cache = (dir / "cache").string();
  config.cache_dir = cache.c_str();
  config.flags = KILN_ENGINE_CACHE_DISABLE;
  kiln_engine engine = nullptr;
  REQUIRE(kiln_engine_create(&config, &engine) == KILN_OK);
  CHECK(put(engine, "ns", "k", "v") == 0);
  CHECK(get(engine, "ns", "k") == "<miss>");
  CHECK(count(engine, "ns") == 0);
  kiln_engine_destroy(engine);
}

TEST_CASE("kiln_blob: bad arguments get a clear status, never a crash", "[capi][blob]") {
  TempDir dir;
  const Engine engine(dir / "cache");
  kiln_blob blob = nullptr;
  std::uint64_t n = 0;
  int flag = 0;
  const std::string long_key(KILN_BLOB_MAX_KEY + 1, 'k');
  const std::string long_space(KILN_BLOB_MAX_NAMESPACE + 1, 'n');

  require_refused(kiln_blob_put(nullptr, "ns", "k", 1, "v", 1, &flag), KILN_ERROR_INVALID_HANDLE, "NULL");
  require_refused(kiln_blob_put(engine, nullptr, "k", 1, "v", 1, &flag), KILN_ERROR_INVALID_ARGUMENT, "name_space");
  require_refused(kiln_blob_put(engine, "", "k", 1, "v", 1, &flag), KILN_ERROR_INVALID_ARGUMENT, "empty");
  require_refused(kiln_blob_put(engine, long_space.c_str(), "k", 1, "v", 1, &flag), KILN_ERROR_INVALID_ARGUMENT,
                  "namespace is 257 bytes");
  require_refused(kiln_blob_put(engine, "ns", nullptr, 3, "v", 1, &flag), KILN_ERROR_INVALID_ARGUMENT, "key is NULL");
  require_refused(kiln_blob_put(engine, "ns", long_key.data(), long_key.size(), "v", 1, &flag),
                  KILN_ERROR_INVALID_ARGUMENT, "key is 65537 bytes");
  require_refused(kiln_blob_put(engine, "ns", "k", 1, nullptr, 5, &flag), KILN_ERROR_INVALID_ARGUMENT, "data is NULL");
  require_refused(kiln_blob_get(engine, "ns", "k", 1, nullptr), KILN_ERROR_INVALID_ARGUMENT, "blob");
  require_refused(kiln_blob_get(engine, "", "k", 1, &blob), KILN_ERROR_INVALID_ARGUMENT, "empty");
  require_refused(kiln_blob_remove(engine, nullptr, "k", 1, &flag), KILN_ERROR_INVALID_ARGUMENT, "name_space");
  require_refused(kiln_blob_count(engine, "ns", nullptr), KILN_ERROR_INVALID_ARGUMENT, "count");
  require_refused(kiln_blob_count(engine, "", &n), KILN_ERROR_INVALID_ARGUMENT, "empty");
  require_refused(kiln_blob_clear(nullptr, "ns", &n), KILN_ERROR_INVALID_HANDLE, "NULL");
  require_refused(kiln_blob_data(nullptr, nullptr, nullptr, nullptr), KILN_ERROR_INVALID_HANDLE, "NULL");
  // A handle of another kind is named as such, never dereferenced.
  require_refused(
      kiln_blob_data(reinterpret_cast<kiln_blob>(static_cast<kiln_engine>(engine)), nullptr, nullptr, nullptr),
      KILN_ERROR_INVALID_HANDLE, "engine");

  // Empty keys and values are values like any other (NULL pointers with a zero size are allowed).
  REQUIRE(kiln_blob_put(engine, "ns", nullptr, 0, nullptr, 0, &flag) == KILN_OK);
  CHECK(flag == 1);
  REQUIRE(kiln_blob_get(engine, "ns", nullptr, 0, &blob) == KILN_OK);
  REQUIRE(blob != nullptr);
  const void* data = nullptr;
  std::size_t size = 99;
  require_refused(kiln_blob_data(blob, nullptr, &size, nullptr), KILN_ERROR_INVALID_ARGUMENT, "data");
  require_refused(kiln_blob_data(blob, &data, nullptr, nullptr), KILN_ERROR_INVALID_ARGUMENT, "size");
  REQUIRE(kiln_blob_data(blob, &data, &size, nullptr) == KILN_OK);
  CHECK(size == 0);
  REQUIRE(kiln_blob_destroy(blob) == KILN_OK);
}

// ---- labels and engines without a runtime (API 7) ------------------------------------------------------

namespace {

/// The labels of the blob under (name_space, key), in order, as "name=value"; {"<miss>"} on a miss.
std::vector<std::string> labels_of(kiln_engine engine, const char* name_space, const std::string& key) {
  kiln_blob blob = nullptr;
  REQUIRE(kiln_blob_get(engine, name_space, key.data(), key.size(), &blob) == KILN_OK);
  if (blob == nullptr) return {"<miss>"};
  std::size_t n = 99;
  REQUIRE(kiln_blob_get_label(blob, 0, &n, nullptr, nullptr) == KILN_OK);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) {
    const char* name = nullptr;
    const char* value = nullptr;
    REQUIRE(kiln_blob_get_label(blob, i, nullptr, &name, &value) == KILN_OK);
    out.push_back(std::string(name) + "=" + value);
  }
  REQUIRE(kiln_blob_destroy(blob) == KILN_OK);
  return out;
}

kiln_status put_labeled(kiln_engine engine, const std::string& key, const std::vector<kiln_blob_label>& labels,
                        const std::string& value = "bytes") {
  int stored = -1;
  return kiln_blob_put_labeled(engine, "triton", key.data(), key.size(), value.data(), value.size(),
                               labels.empty() ? nullptr : labels.data(), labels.size(), &stored);
}

}  // namespace

TEST_CASE("kiln_blob: labels are kept beside the bytes, in order, and read back", "[capi][blob]") {
  CHECK(KILN_API_VERSION >= 7);
  TempDir dir;
  {
    const Engine engine(dir / "cache");
    const std::vector<kiln_blob_label> labels = {
        {"kernel", "triton_poi_fused_add_0"}, {"target", "sm_90"}, {"file", "__grp__k.json"}, {"empty", ""}};
    INFO(kiln_last_error());
    REQUIRE(put_labeled(engine, "KEY/__grp__k.json", labels, "group bytes") == KILN_OK);
    REQUIRE(put(engine, "triton", "KEY/plain.so", "so bytes") == 1);  // no labels
  }
  const Engine fresh(dir / "cache");
  CHECK(labels_of(fresh, "triton", "KEY/__grp__k.json") ==
        std::vector<std::string>{"kernel=triton_poi_fused_add_0", "target=sm_90", "file=__grp__k.json", "empty="});
  CHECK(get(fresh, "triton", "KEY/__grp__k.json") == "group bytes");
  CHECK(labels_of(fresh, "triton", "KEY/plain.so").empty());
  CHECK(labels_of(fresh, "triton", "KEY/absent") == std::vector<std::string>{"<miss>"});

  // Labels are not part of the key: a put with other labels replaces the entry.
  REQUIRE(put_labeled(fresh, "KEY/__grp__k.json", {{"kernel", "other"}}, "new bytes") == KILN_OK);
  CHECK(labels_of(fresh, "triton", "KEY/__grp__k.json") == std::vector<std::string>{"kernel=other"});
  CHECK(get(fresh, "triton", "KEY/__grp__k.json") == "new bytes");
  CHECK(count(fresh, "triton") == 2);

  // A label index past the end is refused, and nothing is written.
  kiln_blob blob = nullptr;
  const std::string key = "KEY/__grp__k.json";
  REQUIRE(kiln_blob_get(fresh, "triton", key.data(), key.size(), &blob) == KILN_OK);
  REQUIRE(blob != nullptr);
  std::size_t n = 77;
  const char* name = "untouched";
  require_refused(kiln_blob_get_label(blob, 1, &n, &name, nullptr), KILN_ERROR_INVALID_ARGUMENT, "past the blob's 1");
  CHECK(n == 77);
  CHECK(std::string(name) == "untouched");
  REQUIRE(kiln_blob_destroy(blob) == KILN_OK);
  require_refused(kiln_blob_get_label(blob, 0, &n, nullptr, nullptr), KILN_ERROR_INVALID_HANDLE, "");
}

TEST_CASE("kiln_blob: bad labels get a clear status and store nothing", "[capi][blob]") {
  TempDir dir;
  const Engine engine(dir / "cache");
  int stored = -1;
  require_refused(kiln_blob_put_labeled(engine, "triton", "k", 1, "v", 1, nullptr, 2, &stored),
                  KILN_ERROR_INVALID_ARGUMENT, "labels is NULL");
  require_refused(put_labeled(engine, "k", {{nullptr, "v"}}), KILN_ERROR_INVALID_ARGUMENT, "labels[0].name is NULL");
  require_refused(put_labeled(engine, "k", {{"a", "v"}, {"b", nullptr}}), KILN_ERROR_INVALID_ARGUMENT,
                  "labels[1].value is NULL");
  require_refused(put_labeled(engine, "k", {{"", "v"}}), KILN_ERROR_INVALID_ARGUMENT, "a name of 0 bytes");
  require_refused(put_labeled(engine, "k", {{"has space", "v"}}), KILN_ERROR_INVALID_ARGUMENT, "has space");
  require_refused(put_labeled(engine, "k", {{"a", "1"}, {"a", "2"}}), KILN_ERROR_INVALID_ARGUMENT, "given twice");
  const std::string long_name(KILN_BLOB_MAX_LABEL_NAME + 1, 'n');
  require_refused(put_labeled(engine, "k", {{long_name.c_str(), "v"}}), KILN_ERROR_INVALID_ARGUMENT, "a name of 65");
  const std::string long_value(KILN_BLOB_MAX_LABEL_VALUE + 1, 'v');
  require_refused(put_labeled(engine, "k", {{"a", long_value.c_str()}}), KILN_ERROR_INVALID_ARGUMENT,
                  "more than the limit of 1024");
  std::vector<kiln_blob_label> many(KILN_BLOB_MAX_LABELS + 1, kiln_blob_label{"a", "v"});
  require_refused(put_labeled(engine, "k", many), KILN_ERROR_INVALID_ARGUMENT, "KILN_BLOB_MAX_LABELS");
  CHECK(stored == -1);
  CHECK(count(engine, "triton") == 0);
  CHECK(entry_files(dir / "cache").empty());
}

TEST_CASE("kiln_engine: KILN_ENGINE_NO_RUNTIME keeps a cache without a GPU runtime", "[capi][blob]") {
  TempDir dir;
  const Engine engine(dir / "cache", 0, KILN_ENGINE_NO_RUNTIME);
  kiln_vendor vendor = KILN_VENDOR_CUDA;
  REQUIRE(kiln_engine_vendor(engine, &vendor) == KILN_OK);
  CHECK(vendor == KILN_VENDOR_AUTO);  // no runtime: no device, whatever the machine has
  int devices = -1;
  int device = 7;
  REQUIRE(kiln_engine_device_count(engine, &devices, &device) == KILN_OK);
  CHECK(devices == 0);
  CHECK(device == -1);
  void* pointer = nullptr;
  CHECK(kiln_malloc(engine, 256, -1, &pointer) == KILN_ERROR_DEVICE_UNAVAILABLE);
  REQUIRE(put(engine, "ns", "key", "value") == 1);
  CHECK(get(engine, "ns", "key") == "value");

  // Flags beyond the known ones are still refused.
  kiln_engine_config config;
  kiln_engine_config_init(&config);
  const std::string cache = (dir / "cache").string();
  config.cache_dir = cache.c_str();
  config.flags = 0x80u;
  kiln_engine other = nullptr;
  require_refused(kiln_engine_create(&config, &other), KILN_ERROR_INVALID_ARGUMENT, "unknown bits 0x80");
}
