#include "sharded_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "posix_util.hpp"

namespace kiln::cache::detail {
namespace {

std::string user_name(uid_t uid) {
  struct passwd entry {};
  struct passwd* found = nullptr;
  char buffer[1024];
  if (::getpwuid_r(uid, &entry, buffer, sizeof(buffer), &found) == 0 && found != nullptr) return found->pw_name;
  return "?";
}

}  // namespace

bool is_permission_error(int error) noexcept { return error == EACCES || error == EPERM || error == EROFS; }

int make_private_dirs(const std::string& path) noexcept {
  try {
    std::string partial;
    std::size_t position = 0;
    while (position != std::string::npos) {
      position = path.find('/', position + 1);
      partial = path.substr(0, position);
      if (partial.empty()) continue;
      if (const int error = make_private_dir(partial); error != 0 && error != ENOTDIR) {
        // A component we may not create (e.g. "/home") but that exists is fine.
        struct stat st {};
        if (::stat(partial.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return error;
      }
    }
    return 0;
  } catch (...) {
    return ENOMEM;
  }
}

std::string distrust_reason(std::string_view what, const std::string& path, const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} {} is not a directory", what, path);
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    return fmt::format("{} {} is owned by uid {} ({}), not by the current user (uid {}, {})", what, path, st.st_uid,
                       user_name(st.st_uid), me, user_name(me));
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    return fmt::format("{} {} is world-writable (mode {:04o})", what, path, st.st_mode & 07777);
  }
  if ((st.st_mode & S_IWGRP) != 0) {
    return fmt::format("{} {} is group-writable (mode {:04o})", what, path, st.st_mode & 07777);
  }
  return {};
}

bool is_hex(std::string_view text) noexcept {
  return std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool unlink_if_same(const std::string& path, const struct stat& seen) noexcept {
  struct stat now {};
  if (::lstat(path.c_str(), &now) != 0 || now.st_ino != seen.st_ino || now.st_dev != seen.st_dev) return false;
  return ::unlink(path.c_str()) == 0;
}

std::string ShardedNames::shard_name(unsigned shard) {
  return {kHexDigits[(shard >> 4) & 0xF], kHexDigits[shard & 0xF]};
}

std::string ShardedNames::path_of(const Hash128& key) const {
  const std::string hex = key.hex();
  std::string path;
  path.reserve(m_folder.size() + 4 + hex.size() + m_suffix.size());
  path.append(m_folder).append("/").append(hex, 0, 2).append("/").append(hex, 2, 30).append(m_suffix);
  return path;
}

std::optional<Hash128> ShardedNames::key_of(std::string_view shard, std::string_view name) const noexcept {
  if (shard.size() != 2 || name.size() != 30 + m_suffix.size() || !name.ends_with(m_suffix)) return std::nullopt;
  const std::string_view stem = name.substr(0, 30);
  if (!is_hex(shard) || !is_hex(stem)) return std::nullopt;
  char hex[32];
  std::memcpy(hex, shard.data(), 2);
  std::memcpy(hex + 2, stem.data(), 30);
  return Hash128::from_hex(std::string_view(hex, sizeof(hex)));
}

int ShardedNames::make_shard_folder(const std::string& file, const std::string& root) const {
  const std::string shard = file.substr(0, file.rfind('/'));
  int error = make_private_dir(shard);
  if (error == ENOENT) {  // the folder itself was removed (e.g. the cache was cleared): recreate it
    error = make_private_dirs(root);
    if (error == 0) error = make_private_dir(m_folder);
    if (error == 0) error = make_private_dir(shard);
  }
  return error;
}

ShardedNames::Opened ShardedNames::open_shard(const std::string& shard_path) const {
  Opened opened;
  opened.fd = ::open(shard_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (opened.fd >= 0) return opened;
  const int error = errno;
  if ((error == ELOOP || error == ENOTDIR) && ::lstat(shard_path.c_str(), &opened.in_place) == 0 &&
      !S_ISDIR(opened.in_place.st_mode)) {
    opened.is_link_or_file = true;
  }
  errno = error;
  return opened;
}

void ShardedNames::for_each_shard(const std::function<void(std::string_view, const std::string&, int)>& on_shard,
                                  const std::function<void(const std::string&, const struct stat&)>& on_not_folder,
                                  bool report_folder) const {
  const Opened top = open_shard(m_folder);
  if (top.fd < 0) {
    if (top.is_link_or_file && report_folder && on_not_folder) on_not_folder(m_folder, top.in_place);
    return;
  }
  DIR* listing = ::fdopendir(top.fd);
  if (listing == nullptr) {
    ::close(top.fd);
    return;
  }
  std::vector<std::string> shards;
  try {
    while (const dirent* item = ::readdir(listing)) {
      const std::string_view name(item->d_name);
      if (name.size() == 2 && is_hex(name)) shards.emplace_back(name);
    }
  } catch (...) {
    ::closedir(listing);
    throw;
  }
  ::closedir(listing);
  std::sort(shards.begin(), shards.end());
  for (const std::string& shard : shards) {
    const std::string shard_path = m_folder + "/" + shard;
    const Opened opened = open_shard(shard_path);
    if (opened.fd < 0) {
      if (opened.is_link_or_file && on_not_folder) on_not_folder(shard_path, opened.in_place);
      continue;
    }
    const UniqueFd held(opened.fd);
    on_shard(shard, shard_path, opened.fd);
  }
}

}  // namespace kiln::cache::detail
