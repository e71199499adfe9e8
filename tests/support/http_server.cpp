#include "http_server.hpp"

#include "server_process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kiln::test {
namespace {

bool accepts(std::uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return ok;
}

/// fork + exec `args`, stdout and stderr to `output`; the child dies with this process.
pid_t spawn(std::vector<std::string> args, const std::filesystem::path& output) {
  std::vector<char*> argv;  // built before fork: the child of a threaded process must not allocate
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const std::string output_path = output.string();
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    const int out_fd = open(output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (out_fd >= 0) {
      dup2(out_fd, STDOUT_FILENO);
      dup2(out_fd, STDERR_FILENO);
    }
    execvp(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

void stop_pid(pid_t& pid, int first_signal) noexcept {
  if (pid <= 0) return;
  kill(pid, first_signal);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid = -1;
}

/// Waits until `port` accepts (10 s); throws with `log` when the process exits or time runs out.
void wait_listening(pid_t& pid, std::uint16_t port, const std::string& what, const std::filesystem::path& log) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      pid = -1;
      throw std::runtime_error(what + " exited during start-up (status " + std::to_string(status) +
                               "): " + read_text(log));
    }
    if (accepts(port)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop_pid(pid, SIGKILL);
  throw std::runtime_error(what + " did not listen within 10 s: " + read_text(log));
}

void run_checked(std::vector<std::string> args, const std::filesystem::path& log) {
  pid_t pid = spawn(std::move(args), log);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("command failed: " + read_text(log));
}

}  // namespace

std::optional<std::filesystem::path> NginxServer::find_binary() {
  return find_executable("NGINX", "nginx", "/usr/sbin/nginx");
}

NginxServer::NginxServer(NginxOptions options) : m_tls(options.tls) {
  const auto binary = find_binary();
  if (!binary) throw std::runtime_error("nginx not found (PATH, /usr/sbin/nginx, NGINX)");
  const std::filesystem::path dir = m_dir.path();
  std::filesystem::create_directories(dir / "www");
  std::filesystem::create_directories(dir / "tmp");
  m_port = free_loopback_port();

  std::string auth;
  if (!options.basic_password.empty()) {
    m_dir.write_file("users", options.basic_user + ":{PLAIN}" + options.basic_password + "\n", 0600);
    auth = "      auth_basic \"kiln\";\n      auth_basic_user_file " + (dir / "users").string() + ";\n";
  }
  if (!options.bearer_token.empty()) {
    auth += "      if ($http_authorization != \"Bearer " + options.bearer_token + "\") { return 401; }\n";
  }
  std::string listen = "127.0.0.1:" + std::to_string(m_port);
  std::string tls;
  if (m_tls) {
    run_checked(
        {"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", (dir / "key.pem").string(), "-out", cert_path().string()},
        dir / "openssl.log");
    listen += " ssl";
    tls = "    ssl_certificate " + cert_path().string() + ";\n    ssl_certificate_key " + (dir / "key.pem").string() +
          ";\n";
  }
  const std::string tmp = (dir / "tmp").string();
  std::string config;
  config += "daemon off;\nmaster_process off;\nworker_processes 1;\n";
  config += "pid " + (dir / "nginx.pid").string() + ";\n";
  config += "error_log " + (dir / "error.log").string() + " warn;\n";
  if (geteuid() == 0) config += "user root root;\n";  // CI runs as root: serve as root, not nobody
  config += "events { worker_connections 256; }\n";
  config += "http {\n  access_log " + (dir / "access.log").string() + ";\n";
  for (const char* kind : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"}) {
    config += std::string("  ") + kind + "_temp_path " + tmp + "/" + kind + ";\n";
  }
  config += "  server {\n    listen " + listen + ";\n" + tls + "    root " + (dir / "www").string() + ";\n";
  config += "    location / {\n      dav_methods PUT DELETE;\n      create_full_put_path on;\n";
  config += "      dav_access user:rw;\n      client_max_body_size 0;\n" + auth + "    }\n  }\n}\n";
  m_dir.write_file("nginx.conf", config, 0600);

  m_pid = spawn(
      {binary->string(), "-p", dir.string(), "-c", (dir / "nginx.conf").string(), "-e", (dir / "error.log").string()},
      dir / "nginx.out");
  wait_listening(m_pid, m_port, "nginx", dir / "error.log");
}

NginxServer::~NginxServer() { stop(); }
void NginxServer::stop() noexcept { stop_pid(m_pid, SIGTERM); }
void NginxServer::kill_now() noexcept { stop_pid(m_pid, SIGKILL); }

std::string NginxServer::url(std::string_view path) const {
  return std::string(m_tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(m_port) + std::string(path);
}

FaultServer::FaultServer(std::string_view mode, std::string_view body) {
  m_port = free_loopback_port();
  const std::string body_file = m_dir.write_file("body", body, 0600);
  const std::string script = std::string(KILN_SOURCE_DIR) + "/tests/remote/fault_server.py";
  m_pid = spawn(
      {"python3", script, std::string(mode), std::to_string(m_port), (m_dir.path() / "requests").string(), body_file},
      m_dir.path() / "output");
  wait_listening(m_pid, m_port, "fault_server.py", m_dir.path() / "output");
}

FaultServer::~FaultServer() { stop(); }
void FaultServer::stop() noexcept { stop_pid(m_pid, SIGKILL); }

std::string FaultServer::url(std::string_view path) const {
  return "http://127.0.0.1:" + std::to_string(m_port) + std::string(path);
}

std::string FaultServer::requests() const { return read_text(m_dir.path() / "requests"); }

}  // namespace kiln::test
