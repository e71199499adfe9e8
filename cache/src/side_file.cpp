#include "kiln/cache/side_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "atomic_file.hpp"

namespace kiln::cache {
namespace {

constexpr std::string_view kSideDirectory = "compilers";

bool plain_name(std::string_view name) noexcept {
  return !name.empty() && name.size() < 200 && name.find('/') == std::string_view::npos && name != "." && name != ".." &&
         name.front() != '.';
}

/// <root>/compilers when it is a directory only the current user can write, else empty.
std::string trusted_directory(const Store& store, bool create) {
  if (store.mode() == StoreMode::memory_only || store.config().root.empty()) return {};
  if (create && store.mode() != StoreMode::read_write) return {};
  const std::string dir = (store.config().root / std::string(kSideDirectory)).string();
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return {};
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return {};
  }
  return dir;
}

}  // namespace

std::optional<std::string> read_side_file(const Store& store, std::string_view name, std::size_t max_bytes) noexcept {
  try {
    if (!plain_name(name)) return std::nullopt;
    const std::string dir = trusted_directory(store, false);
    if (dir.empty()) return std::nullopt;
    const std::string path = dir + "/" + std::string(name);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return std::nullopt;
    std::optional<std::string> out;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
        static_cast<std::size_t>(st.st_size) <= max_bytes) {
      std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
      std::size_t done = 0;
      while (done < bytes.size()) {
        const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
      }
      if (done == bytes.size()) out = std::move(bytes);
    }
    ::close(fd);
    return out;
  } catch (...) {
    return std::nullopt;
  }
}

bool write_side_file(const Store& store, std::string_view name, std::string_view bytes) noexcept {
  try {
    if (!plain_name(name)) return false;
    const std::string dir = trusted_directory(store, true);
    if (dir.empty()) return false;
    detail::AtomicFile file(dir + "/" + std::string(name));
    return file.write(std::as_bytes(std::span(bytes.data(), bytes.size()))) && file.commit();
  } catch (...) {
    return false;
  }
}

}  // namespace kiln::cache
