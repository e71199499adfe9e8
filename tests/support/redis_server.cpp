#include "redis_server.hpp"

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
#include <future>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace kiln::test {
namespace {}  // namespace

RedisReply redis_command(redisContext* context, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const std::string& arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  return RedisReply(
      static_cast<redisReply*>(redisCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lengths.data())));
}

std::optional<std::filesystem::path> RedisServer::find_binary() {
  return find_executable("REDIS_SERVER", "redis-server", "/usr/bin/redis-server");
}

std::uint16_t RedisServer::free_port() { return free_loopback_port(); }

RedisServer::RedisServer(RedisServerOptions options) : m_password(std::move(options.password)) {
  const auto binary = find_binary();
  if (!binary) throw std::runtime_error("redis-server not found (PATH, /usr/bin, REDIS_SERVER)");
  m_port = free_port();

  std::vector<std::string> args = {binary->string(),
                                   "--port",
                                   std::to_string(m_port),
                                   "--bind",
                                   "127.0.0.1",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--dir",
                                   m_dir.path().string(),
                                   "--daemonize",
                                   "no",
                                   "--protected-mode",
                                   "no",
                                   "--enable-debug-command",
                                   "yes",
                                   "--logfile",
                                   (m_dir.path() / "redis.log").string()};
  if (!m_password.empty()) {
    args.emplace_back("--requirepass");
    args.push_back(m_password);
  }
  for (std::string& arg : options.extra_args) args.push_back(std::move(arg));

  std::vector<char*> argv;  // built before fork: the child of a threaded process must not allocate
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // The server must not outlive the test, whatever happens to it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      dup2(null_fd, STDIN_FILENO);
      dup2(null_fd, STDOUT_FILENO);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  m_pid = pid;

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string last_error;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(m_pid, &status, WNOHANG) == m_pid) {
      m_pid = -1;
      const std::string log = read_text(m_dir.path() / "redis.log");
      throw std::runtime_error("redis-server exited during start-up (status " + std::to_string(status) + "): " + log);
    }
    const timeval timeout{0, 200000};
    RedisContext context(redisConnectWithTimeout("127.0.0.1", m_port, timeout));
    if (context && context->err == 0) {
      if (!m_password.empty()) redis_command(context.get(), {"AUTH", m_password});
      const RedisReply pong = redis_command(context.get(), {"PING"});
      if (pong && pong->type == REDIS_REPLY_STATUS) return;
      last_error = pong ? std::string(pong->str, pong->len) : std::string(context->errstr);
    } else if (context) {
      last_error = context->errstr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string log = read_text(m_dir.path() / "redis.log");
  stop();
  throw std::runtime_error("redis-server did not answer PING within 10 s (" + last_error + "): " + log);
}

RedisServer::~RedisServer() { stop(); }

void RedisServer::stop() noexcept {
  if (m_pid <= 0) return;
  kill(m_pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int status = 0;
  while (waitpid(m_pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(m_pid, SIGKILL);
      waitpid(m_pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  m_pid = -1;
}

std::string RedisServer::url(std::string_view user_info, int db) const {
  std::string text = "redis://";
  if (!user_info.empty()) {
    text += user_info;
    text += '@';
  }
  text += "127.0.0.1:" + std::to_string(m_port);
  if (db != 0) text += "/" + std::to_string(db);
  return text;
}

RedisContext RedisServer::connect(int db) const {
  const timeval timeout{2, 0};
  RedisContext context(redisConnectWithTimeout("127.0.0.1", m_port, timeout));
  if (!context || context->err != 0) {
    throw std::runtime_error("test connection to redis failed: " +
                             std::string(context ? context->errstr : "no memory"));
  }
  if (!m_password.empty()) redis_command(context.get(), {"AUTH", m_password});
  if (db != 0) redis_command(context.get(), {"SELECT", std::to_string(db)});
  return context;
}

RedisReply RedisServer::command(const std::vector<std::string>& args, int db) const {
  const RedisContext context = connect(db);
  RedisReply reply = redis_command(context.get(), args);
  if (!reply) throw std::runtime_error("test command failed: " + std::string(context->errstr));
  return reply;
}

std::optional<std::string> RedisServer::get(const std::string& key, int db) const {
  const RedisReply reply = command({"GET", key}, db);
  if (reply->type != REDIS_REPLY_STRING) return std::nullopt;
  return std::string(reply->str, reply->len);
}

void RedisServer::set(const std::string& key, std::string_view value, int db) const {
  const RedisReply reply = command({"SET", key, std::string(value)}, db);
  if (reply->type != REDIS_REPLY_STATUS) throw std::runtime_error("test SET failed");
}

bool RedisServer::exists(const std::string& key, int db) const {
  const RedisReply reply = command({"EXISTS", key}, db);
  return reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
}

std::thread RedisServer::debug_sleep(int seconds) const {
  std::promise<void> connected;
  std::future<void> ready = connected.get_future();
  std::thread sleeper([this, seconds, connected = std::move(connected)]() mutable {
    const RedisContext context = connect();
    connected.set_value();
    redis_command(context.get(), {"DEBUG", "SLEEP", std::to_string(seconds)});
  });
  ready.wait();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let DEBUG SLEEP reach the server
  return sleeper;
}

}  // namespace kiln::test
