#pragma once
// Private to cache/: the one layout both the entry store (store.cpp: <root>/v1) and the dependency
// manifests (includes/manifest_store.cpp: <root>/manifests) keep their files in. A file named by a 128-bit key lives
// at <folder>/<2 hex>/<30 hex><suffix>, every folder mode 0700 and trusted only when it is a real folder
// of this user that nobody else may write to. What both need of that layout is here, once: the trust
// rule, names both ways, creating the folders, removing a file only while it is the one that was looked
// at, and walking the shard folders without ever entering a link (or a file) in place of one.
#include <sys/stat.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/base/hash.hpp"

namespace kiln::cache::detail {

inline constexpr char kHexDigits[] = "0123456789abcdef";

/// errno values that say "not allowed here": the store or the manifests then go read-only.
[[nodiscard]] bool is_permission_error(int error) noexcept;

/// mkdir -p, creating missing components with mode 0700. An existing component we may not create (e.g.
/// "/home") is fine. Returns 0 or the errno.
int make_private_dirs(const std::string& path) noexcept;

/// Why a folder of the cache must not be trusted: not a folder, not this user's, or group/world-writable
/// ("<what> <path> is ..."); empty when it may be trusted. `what` names the folder ("cache root",
/// "shard directory", "manifest directory").
[[nodiscard]] std::string distrust_reason(std::string_view what, const std::string& path, const struct stat& st);

[[nodiscard]] bool is_hex(std::string_view text) noexcept;

/// Removes `path` if it is still the file `seen` describes (a writer may have renamed a fresh file into
/// place since it was looked at). True when it removed it.
bool unlink_if_same(const std::string& path, const struct stat& seen) noexcept;

/// The names of one sharded folder: <folder>/<2 hex>/<30 hex><suffix>.
class ShardedNames {
 public:
  ShardedNames() = default;
  ShardedNames(std::string folder, std::string_view suffix) : m_folder(std::move(folder)), m_suffix(suffix) {}

  [[nodiscard]] const std::string& folder() const noexcept { return m_folder; }
  [[nodiscard]] std::string_view suffix() const noexcept { return m_suffix; }
  /// "<2 hex>" of shard 0..255.
  [[nodiscard]] static std::string shard_name(unsigned shard);
  /// <folder>/<2 hex>/<30 hex><suffix>.
  [[nodiscard]] std::string path_of(const Hash128& key) const;
  /// The key a file name in shard folder `shard` stands for; nullopt for any other name (temps, strays).
  [[nodiscard]] std::optional<Hash128> key_of(std::string_view shard, std::string_view name) const noexcept;

  /// Creates the shard folder of `file` (mode 0700); when the folder itself is missing, first the
  /// missing components of `root` and the folder. Returns 0 or the errno.
  [[nodiscard]] int make_shard_folder(const std::string& file, const std::string& root) const;

  /// Opens shard folder <folder>/<shard> to read it: O_NOFOLLOW on a path without a trailing '/', so
  /// a link in its place is never followed. -1 (errno set) when it cannot be opened; then, when a link
  /// or a file stands in its place, `*in_place` describes it (lstat) and is_link_or_file is true.
  struct Opened {
    int fd = -1;
    bool is_link_or_file = false;
    struct stat in_place {};
  };
  [[nodiscard]] Opened open_shard(const std::string& shard_path) const;

  /// Calls `on_shard(shard_name, shard_path, fd)` for each "<2 hex>" folder in name order (the walker
  /// closes the fd after the call: read it through fdopendir(dup(fd))), and `on_not_folder(path, lstat)` for a link or file in place of one (or of
  /// the folder itself, when `report_folder`). Never enters either.
  void for_each_shard(const std::function<void(std::string_view, const std::string&, int)>& on_shard,
                      const std::function<void(const std::string&, const struct stat&)>& on_not_folder,
                      bool report_folder = false) const;

 private:
  std::string m_folder;
  std::string_view m_suffix;
};

}  // namespace kiln::cache::detail
