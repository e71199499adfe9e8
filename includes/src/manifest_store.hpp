#pragma once
// Private to the include home (includes/src/): what the two halves of DependencyManifests share.
// manifest_store.cpp holds the instance (its mode, warnings and publishing), the lookups and the
// recording; manifest_read.cpp reads manifest files (raw, for both) and answers the read-only queries
// (recorded, explain, scan, read_file) and the removals.
#include <sys/stat.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/includes/dep_manifest.hpp"
#include "manifest_check.hpp"
#include "posix_util.hpp"
#include "sharded_dir.hpp"
#include "stat_memo.hpp"

namespace kiln::cache {
namespace detail {

inline constexpr std::string_view kManifestDirectory = "manifests";
inline constexpr std::string_view kManifestSuffix = ".kman";

/// The request key a manifest file name stands for ("<30 hex>.kman" in shard "<2 hex>"), else nullopt.
[[nodiscard]] std::optional<Hash128> manifest_file_hash(std::string_view shard, std::string_view name) noexcept;

/// Buffers that manifest files are read into, kept for the next lookup: a lookup in a process that
/// has made one before reads into memory it has touched already (fresh memory costs a page fault per
/// page, and manifests of big trees are hundreds of KB). Thread-safe; bounded in count and size.
class ReadBuffers {
 public:
  struct Buffer {
    std::unique_ptr<std::byte[]> bytes;
    std::size_t capacity = 0;
  };
  static constexpr std::size_t kKeep = 4;                 ///< buffers kept
  static constexpr std::size_t kKeepBytes = 8ULL << 20;  ///< a larger buffer is not kept

  /// A buffer of at least `size` bytes (contents undefined). Throws std::bad_alloc.
  Buffer take(std::size_t size);
  void give(Buffer buffer) noexcept;

 private:
  std::mutex m_mutex;
  std::vector<Buffer> m_free;
};

/// A manifest file read whole, or its first part (not parsed yet).
struct RawManifest {
  enum class Kind : std::uint8_t { ok, absent, content_error, io_error } kind = Kind::absent;
  std::unique_ptr<std::byte[]> bytes;  ///< room for the whole file
  std::size_t capacity = 0;  ///< of bytes
  std::size_t size = 0;      ///< the file's
  std::size_t have = 0;      ///< bytes read so far (size once read whole)
  UniqueFd fd;               ///< open while `have` < `size` (read_more reads on)
  struct stat st {};     ///< of the file read (or of the link found, for a symbolic link)
  bool have_st = false;  ///< st describes what is at the path (removal checks it is still the same file)
  std::string error;     ///< content or I/O error
  [[nodiscard]] std::span<const std::byte> span() const noexcept { return {bytes.get(), have}; }
};

/// Reads on, up to `upto` bytes of the file (at most its size). False after setting kind and error on
/// failure. Manifests are published by rename and never written in place, so the open file's bytes stay
/// those of one manifest however long ago the first part was read.
bool read_more(RawManifest& raw, std::size_t upto);

/// Opens (O_NOFOLLOW, O_NONBLOCK) and reads a manifest: whole, or with `prefix` > 0 its first `prefix`
/// bytes (read_more reads the rest). A symbolic link, a non-regular file, a file of another owner and one
/// over the size limit are content errors; open/read failures are I/O errors.
[[nodiscard]] RawManifest read_raw(const std::string& path, const ManifestLimits& limits,
                                   ReadBuffers* buffers = nullptr, std::size_t prefix = 0);

}  // namespace detail

struct DependencyManifests::State {
  explicit State(std::chrono::nanoseconds memo_time) : stat_memo(memo_time) {}

  std::string root;
  std::string directory;        ///< <root>/manifests
  detail::ShardedNames names;   ///< <root>/manifests/<2 hex>/<30 hex>.kman
  std::atomic<StoreMode> mode{StoreMode::read_write};
  mutable std::mutex reason_mutex;
  std::string reason;
  std::atomic<bool> write_failure_warned{false};
  std::atomic<bool> refusal_warned{false};
  std::atomic<bool> damage_warned{false};
  std::atomic<bool> install_refusal_warned{false};
  std::atomic<std::uint64_t> installs_refused{0};  ///< install(): refused for scope, counts or cost
  detail::StatMemo stat_memo;  ///< shared by this instance's lookups and resolves (ManifestConfig::stat_memo)
  detail::ValidatedSets validated;  ///< dependency sets checked by this instance's lookups (same time limit)
  detail::ReadBuffers buffers;      ///< what lookups read manifests into

  /// Lowers the mode (never raises it) and records why; `warn`: says so at warning level.
  void degrade(StoreMode to, const std::string& why, bool warn);
  void warn_write_failure(const std::string& what);
  /// A manifest that did not parse was removed or is being replaced: a warning the first time for this
  /// instance (something damaged or wrote it), info level afterwards.
  void warn_damage(const std::string& what);
  void warn_refusal(const std::string& what);
  [[nodiscard]] std::string path_of(const Hash128& key) const { return names.path_of(key); }
  /// Publishes `bytes` at `path` atomically. False (after warning) on failure.
  bool publish(const std::string& path, std::span<const std::byte> bytes);
};

}  // namespace kiln::cache
