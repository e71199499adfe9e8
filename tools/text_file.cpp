#include "text_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include <fmt/format.h>

#include "cli.hpp"

namespace kiln::cli {

std::string read_text_file(const std::filesystem::path& path, std::string_view what, std::uint64_t max_bytes) {
  const auto system_text = [](int error) { return std::error_code(error, std::system_category()).message(); };
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below, as is a device).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw UsageError(fmt::format("{} {}: cannot read: {}", what, path.string(), system_text(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw UsageError(fmt::format("{} {}: cannot read: {}", what, path.string(), system_text(errno)));
  }
  if (S_ISDIR(st.st_mode)) throw UsageError(fmt::format("{} {}: is a directory, not a file", what, path.string()));
  if (!S_ISREG(st.st_mode)) {
    throw UsageError(
        fmt::format("{} {}: not a regular file (a FIFO, socket or device is not read)", what, path.string()));
  }
  const auto too_large = [&](std::uint64_t size) {
    return UsageError(fmt::format("{} {}: {} bytes, over the limit of {} bytes (what one cache entry's key may hold)",
                                  what, path.string(), size, max_bytes));
  };
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) throw too_large(static_cast<std::uint64_t>(st.st_size));
  // Read to the end, but never past the limit (the file may grow while it is read).
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t length = 0;
  for (;;) {
    if (length == text.size()) {
      if (text.size() > max_bytes) throw too_large(text.size());
      text.resize(std::max<std::size_t>(text.size() * 2, 4096));
    }
    const ssize_t n = ::read(fd, text.data() + length, text.size() - length);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw UsageError(fmt::format("{} {}: read error: {}", what, path.string(), system_text(errno)));
    }
    if (n == 0) break;
    length += static_cast<std::size_t>(n);
  }
  if (length > max_bytes) throw too_large(length);
  text.resize(length);
  return text;
}

}  // namespace kiln::cli
