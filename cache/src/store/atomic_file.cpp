#include "atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <random>

namespace kiln::cache::detail {
namespace {

std::uint64_t random_suffix() noexcept {
  thread_local std::mt19937_64 generator = [] {
    std::random_device device;
    std::seed_seq seed{device(), device(), static_cast<unsigned>(::getpid())};
    return std::mt19937_64(seed);
  }();
  return generator();
}

}  // namespace

AtomicFile::AtomicFile(std::string target_path) noexcept : m_target_path(std::move(target_path)) {
  try {
    create();
  } catch (...) {  // std::bad_alloc from formatting the name
    m_error = ENOMEM;
    m_error_text = "out of memory";
    m_temp_path.clear();
  }
}

void AtomicFile::create() {
  const std::size_t slash = m_target_path.rfind('/');
  const std::size_t name_begin = slash == std::string::npos ? 0 : slash + 1;
  // A handful of attempts: a name clash needs the same pid and the same 64 random bits.
  for (int attempt = 0; attempt < 4; ++attempt) {
    m_temp_path =
        fmt::format("{}.{}{}{}.{:016x}", m_target_path.substr(0, name_begin),
                    std::string_view(m_target_path).substr(name_begin), kTempMarker, ::getpid(), random_suffix());
    m_fd = ::open(m_temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (m_fd >= 0) return;
    if (errno != EEXIST) break;
  }
  fail(errno, "create", m_temp_path);
  m_temp_path.clear();
}

AtomicFile::~AtomicFile() {
  if (m_fd >= 0) ::close(m_fd);
  if (!m_committed && !m_temp_path.empty()) ::unlink(m_temp_path.c_str());
}

void AtomicFile::fail(int error, const char* step, const std::string& path) noexcept {
  m_error = error;
  try {
    m_error_text = fmt::format("{} {}: {}", step, path, std::strerror(error));
  } catch (...) {
    m_error_text.clear();
  }
}

bool AtomicFile::write(std::span<const std::byte> bytes) noexcept {
  if (m_fd < 0 || m_error != 0) return false;
  while (!bytes.empty()) {
    const ssize_t n = ::write(m_fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(errno, "write", m_temp_path);
      return false;
    }
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

bool AtomicFile::commit() noexcept {
  if (m_fd < 0 || m_error != 0) return false;
  // No fsync: every file published here is checked whole when read (an entry's checksum covers all
  // its bytes, a manifest's its own), so what a crash or a failed writeback leaves behind, a short or
  // zeroed file under the name, is refused as damaged and recompiled, never used. fsync would make a
  // power cut leave the old file or the complete new one instead; it costs 5-7 ms a file on the CI-kind
  // VM, on every compile's entry and manifest, and only a recompile is at stake.
  const int fd = m_fd;
  m_fd = -1;
  if (::close(fd) != 0) {
    fail(errno, "close", m_temp_path);
    return false;
  }
  if (::rename(m_temp_path.c_str(), m_target_path.c_str()) != 0) {
    fail(errno, "rename to", m_target_path);
    return false;
  }
  m_committed = true;
  return true;
}

long temp_file_owner(std::string_view file_name) noexcept {
  if (file_name.empty() || file_name[0] != '.') return -1;
  const std::size_t marker = file_name.rfind(kTempMarker);
  if (marker == std::string_view::npos) return -1;
  const std::string_view rest = file_name.substr(marker + kTempMarker.size());
  long pid = -1;
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
  if (error != std::errc{} || end == rest.data() || end == rest.data() + rest.size() || *end != '.' || pid <= 0) {
    return -1;
  }
  return pid;
}

}  // namespace kiln::cache::detail
