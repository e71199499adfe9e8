#include "temp_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <system_error>

namespace kiln::test {

namespace fs = std::filesystem;

TempDir::TempDir(const std::string& prefix) {
  std::string pattern = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
  m_path = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  // Give the owner back every right so remove_all can descend (tests chmod directories to 0500). The
  // folder itself first, so that the walk can open it.
  ::chmod(m_path.c_str(), 0700);
  for (auto it = fs::recursive_directory_iterator(m_path, fs::directory_options::skip_permission_denied, ignored);
       it != fs::recursive_directory_iterator(); it.increment(ignored)) {
    if (it->is_directory(ignored) && !it->is_symlink(ignored)) ::chmod(it->path().c_str(), 0700);
  }
  fs::remove_all(m_path, ignored);
}

std::string TempDir::write_file(const std::string& name, std::string_view text, mode_t mode) const {
  const std::string path = (m_path / name).string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
  const ssize_t written = ::write(fd, text.data(), text.size());
  const int write_error = errno;
  ::close(fd);
  if (written != static_cast<ssize_t>(text.size())) {
    throw std::system_error(written < 0 ? write_error : EIO, std::generic_category(), "write " + path);
  }
  if (::chmod(path.c_str(), mode) != 0) throw std::system_error(errno, std::generic_category(), "chmod " + path);
  return path;
}

}  // namespace kiln::test
