#include "stderr_capture.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <system_error>

namespace kiln::test {

std::size_t count_occurrences(std::string_view haystack, std::string_view needle) {
  std::size_t count = 0;
  for (std::size_t at = haystack.find(needle); at != std::string_view::npos; at = haystack.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

StderrCapture::StderrCapture(AtEnd at_end) : m_at_end(at_end) {
  std::fflush(stderr);
  m_file = ::memfd_create("kiln-test-stderr", MFD_CLOEXEC);
  if (m_file < 0) throw std::system_error(errno, std::generic_category(), "memfd_create");
  m_saved = ::dup(STDERR_FILENO);
  if (m_saved < 0) {
    const int error = errno;
    ::close(m_file);
    throw std::system_error(error, std::generic_category(), "dup stderr");
  }
  ::dup2(m_file, STDERR_FILENO);
}

StderrCapture::~StderrCapture() {
  std::fflush(stderr);
  ::dup2(m_saved, STDERR_FILENO);
  ::close(m_saved);
  if (m_at_end == AtEnd::echo) {
    const std::string captured = text();
    std::fwrite(captured.data(), 1, captured.size(), stderr);
  }
  ::close(m_file);
}

std::string StderrCapture::text() const {
  std::fflush(stderr);
  std::string out;
  char buffer[4096];
  for (off_t offset = 0;;) {
    const ssize_t n = ::pread(m_file, buffer, sizeof(buffer), offset);
    if (n <= 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
    offset += n;
  }
  return out;
}

}  // namespace kiln::test
