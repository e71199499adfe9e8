#pragma once
// A throwaway redis-server for the remote tests and the remote benchmark: 127.0.0.1, a free port, a
// temp directory, no persistence (--save '' --appendonly no). The server dies with the process that
// started it (PR_SET_PDEATHSIG), so a crashed or killed test never leaves one behind; the destructor
// stops it and removes the directory.
#include <hiredis/hiredis.h>

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "temp_dir.hpp"

namespace kiln::test {

struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
};
using RedisReply = std::unique_ptr<redisReply, ReplyDeleter>;
struct ContextDeleter {
  void operator()(redisContext* context) const noexcept { redisFree(context); }
};
using RedisContext = std::unique_ptr<redisContext, ContextDeleter>;

struct RedisServerOptions {
  std::string password;                 ///< --requirepass
  std::vector<std::string> extra_args;  ///< appended to the command line
};

class RedisServer {
 public:
  /// Starts the server and waits until it answers PING (up to 10 s). Throws std::runtime_error with
  /// the server's log when it does not come up.
  explicit RedisServer(RedisServerOptions options = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  /// The redis-server binary (REDIS_SERVER, else PATH, else /usr/bin/redis-server); nullopt if none.
  static std::optional<std::filesystem::path> find_binary();
  /// A TCP port on 127.0.0.1 with nothing listening (bound to port 0, then closed).
  static std::uint16_t free_port();

  /// Stops the server (SIGTERM, then SIGKILL after 5 s). Idempotent.
  void stop() noexcept;
  [[nodiscard]] bool running() const noexcept { return m_pid > 0; }
  [[nodiscard]] std::uint16_t port() const noexcept { return m_port; }
  /// redis://[user:password@]127.0.0.1:<port>[/db]
  [[nodiscard]] std::string url(std::string_view user_info = {}, int db = 0) const;

  /// A fresh authenticated connection for test set-up (planting values, DEBUG SLEEP). Throws.
  [[nodiscard]] RedisContext connect(int db = 0) const;
  /// Runs one command on a fresh connection. Throws on a connection failure.
  RedisReply command(const std::vector<std::string>& args, int db = 0) const;
  /// GET as bytes; nullopt for nil.
  [[nodiscard]] std::optional<std::string> get(const std::string& key, int db = 0) const;
  void set(const std::string& key, std::string_view value, int db = 0) const;
  [[nodiscard]] bool exists(const std::string& key, int db = 0) const;
  /// Makes the server answer nothing for `seconds` (DEBUG SLEEP, sent from a thread on a connection of
  /// its own). Returns once the command has reached the server; join the thread to wait for the end.
  [[nodiscard]] std::thread debug_sleep(int seconds) const;

 private:
  TempDir m_dir{"kiln-redis"};
  std::uint16_t m_port = 0;
  pid_t m_pid = -1;
  std::string m_password;
};

/// Runs a command on a context (binary-safe). nullptr on connection failure.
RedisReply redis_command(redisContext* context, const std::vector<std::string>& args);

}  // namespace kiln::test
