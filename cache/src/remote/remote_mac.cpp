// The remote tier's fleet secret and entry MACs (remote_mac.hpp).
#include "remote_mac.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "kiln/base/sha256.hpp"

namespace kiln::cache::detail {

namespace {

/// What the MAC covers before the key and the bytes: names the use and its version, so a MAC made for
/// anything else under the same secret (a manifest's for an entry, or the other way) is never valid.
constexpr std::string_view kEntryMacLabel{"kiln-remote-entry/1\0", 20};
constexpr std::string_view kManifestMacLabel{"kiln-remote-manifest/1\0", 23};

/// Closes a descriptor on every path out.
class Descriptor {
 public:
  explicit Descriptor(int fd) noexcept : m_fd(fd) {}
  ~Descriptor() {
    if (m_fd >= 0) ::close(m_fd);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  [[nodiscard]] int get() const noexcept { return m_fd; }

 private:
  int m_fd;
};

}  // namespace

namespace {

/// The private file `path` named by `variable`, less one trailing newline; see read_secret_file.
std::string read_private_file(std::string_view variable, const std::string& path, std::size_t min_bytes) {
  const auto refuse = [&path, variable](std::string_view why) {
    return std::invalid_argument(fmt::format("{}={}: {}", variable, path, why));
  };
  if (path.empty()) {
    throw refuse(variable == "KILN_REMOTE_SECRET_FILE" ? "set but empty (unset it to run the remote tier unauthenticated)"
                                                       : "set but empty (unset it)");
  }
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
  const Descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (fd.get() < 0) throw refuse(fmt::format("cannot open it: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw refuse(fmt::format("cannot stat it: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw refuse("not a regular file");
  // A secret others on the machine can read is no secret; one they can write lets them choose it.
  if ((st.st_mode & 077) != 0) {
    throw refuse(fmt::format("its mode {:04o} lets group or others read or write it (chmod 600 it)",
                             static_cast<unsigned>(st.st_mode & 07777)));
  }
  if (static_cast<std::uint64_t>(st.st_size) > kMaxSecretFileBytes) {
    throw refuse(fmt::format("{} bytes: a secret file holds at most {}", st.st_size, kMaxSecretFileBytes));
  }
  std::string secret;
  char buffer[512];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw refuse(fmt::format("cannot read it: {}", std::strerror(errno)));
    if (n == 0) break;
    secret.append(buffer, static_cast<std::size_t>(n));
    if (secret.size() > kMaxSecretFileBytes) {
      throw refuse(fmt::format("more than {} bytes: a secret file holds at most that", kMaxSecretFileBytes));
    }
  }
  if (secret.ends_with('\n')) {
    secret.pop_back();
    if (secret.ends_with('\r')) secret.pop_back();
  }
  if (secret.empty()) throw refuse("the file is empty");
  if (secret.size() < min_bytes) {
    throw refuse(fmt::format("the secret is {} bytes; it needs at least {} (e.g. head -c 32 /dev/urandom | base64)",
                             secret.size(), min_bytes));
  }
  return secret;
}

}  // namespace

std::string read_secret_file(const std::string& path) {
  return read_private_file("KILN_REMOTE_SECRET_FILE", path, kMinSecretBytes);
}

std::string read_credential_file(std::string_view variable, const std::string& path) {
  std::string text = read_private_file(variable, path, 1);
  if (text.find_first_of("\r\n") != std::string::npos) {
    throw std::invalid_argument(fmt::format("{}={}: holds more than one line", variable, path));
  }
  return text;
}

std::string remote_mac(std::string_view secret, RemoteValue what, const Hash128& key, const void* bytes,
                       std::size_t size) {
  kiln::detail::HmacSha256 mac(secret);
  mac.update(what == RemoteValue::manifest ? kManifestMacLabel : kEntryMacLabel);
  mac.update(key.hex());
  mac.update("\0", 1);
  mac.update(bytes, size);
  return kiln::detail::to_hex(mac.finish());
}

}  // namespace kiln::cache::detail
