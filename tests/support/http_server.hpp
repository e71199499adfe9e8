#pragma once
// Throwaway HTTP servers for the HTTP remote tier's tests: a real nginx with its WebDAV PUT/DELETE
// (what a fleet would run), and a tiny fault server (tests/remote/fault_server.py) for what nginx
// cannot be made to do on purpose: stall, answer 500, cut a body short. Both listen on 127.0.0.1 and a
// free port, live in a temp folder, and are stopped by their pid (SIGTERM, then SIGKILL) and killed
// with the test if it dies.
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "temp_dir.hpp"

namespace kiln::test {

struct NginxOptions {
  /// Basic auth: "user" with this password ({PLAIN} in the user file, no htpasswd tool needed).
  std::string basic_password;
  std::string basic_user = "kiln";
  /// Bearer auth: requests without "Authorization: Bearer <token>" get 401.
  std::string bearer_token;
  /// TLS with a self-signed certificate for 127.0.0.1 made by `openssl req` (cert_path()).
  bool tls = false;
};

class NginxServer {
 public:
  /// Writes the configuration and starts nginx in the foreground (one process), waiting until it
  /// accepts connections (up to 10 s). Throws std::runtime_error with nginx's error log otherwise.
  explicit NginxServer(NginxOptions options = {});
  ~NginxServer();
  NginxServer(const NginxServer&) = delete;
  NginxServer& operator=(const NginxServer&) = delete;

  /// The nginx binary (NGINX, else PATH, else /usr/sbin/nginx); nullopt if none.
  static std::optional<std::filesystem::path> find_binary();

  /// SIGTERM, then SIGKILL after 5 s. Idempotent.
  void stop() noexcept;
  /// SIGKILL at once (a server that dies mid-run).
  void kill_now() noexcept;
  [[nodiscard]] std::uint16_t port() const noexcept { return m_port; }
  /// "http://127.0.0.1:<port><path>" (https with tls).
  [[nodiscard]] std::string url(std::string_view path = "/kiln") const;
  /// The folder nginx serves: an object at URL path /kiln/ab/x is the file root()/kiln/ab/x.
  [[nodiscard]] std::filesystem::path root() const { return m_dir.path() / "www"; }
  /// nginx's access log (one line per request: "GET /kiln/ab/... HTTP/1.1" 200 ...).
  [[nodiscard]] std::filesystem::path access_log() const { return m_dir.path() / "access.log"; }
  /// The self-signed certificate (tls only).
  [[nodiscard]] std::filesystem::path cert_path() const { return m_dir.path() / "cert.pem"; }

 private:
  TempDir m_dir{"kiln-nginx"};
  std::uint16_t m_port = 0;
  pid_t m_pid = -1;
  bool m_tls = false;
};

class FaultServer {
 public:
  /// mode: "stall" (reads the request, never answers), "status500" (answers 500 to everything),
  /// "truncate" (GET: 200 announcing `body`'s size, sends half of it, closes), "serve" (GET: 200 with
  /// `body`; HEAD 404; PUT 201). Waits until it listens. Throws std::runtime_error.
  FaultServer(std::string_view mode, std::string_view body = {});
  ~FaultServer();
  FaultServer(const FaultServer&) = delete;
  FaultServer& operator=(const FaultServer&) = delete;
  void stop() noexcept;
  [[nodiscard]] std::string url(std::string_view path = "/kiln") const;
  /// Requests the server has seen (its log, one line per request).
  [[nodiscard]] std::string requests() const;

 private:
  TempDir m_dir{"kiln-fault"};
  std::uint16_t m_port = 0;
  pid_t m_pid = -1;
};

}  // namespace kiln::test
