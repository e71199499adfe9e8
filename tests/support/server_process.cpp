#include "server_process.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

namespace kiln::test {

std::optional<std::filesystem::path> find_executable(const char* env_variable, const std::string& name,
                                                     const std::filesystem::path& fallback) {
  if (const char* explicit_path = std::getenv(env_variable); explicit_path != nullptr && *explicit_path != '\0') {
    if (access(explicit_path, X_OK) == 0) return std::filesystem::path(explicit_path);
    return std::nullopt;
  }
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::string_view rest(path);
    while (!rest.empty()) {
      const std::size_t colon = rest.find(':');
      const std::filesystem::path candidate = std::filesystem::path(rest.substr(0, colon)) / name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  if (access(fallback.c_str(), X_OK) == 0) return fallback;
  return std::nullopt;
}

std::uint16_t free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket failed: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    close(fd);
    throw std::runtime_error(std::string("bind/getsockname failed: ") + std::strerror(error));
  }
  close(fd);
  return ntohs(address.sin_port);
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace kiln::test
