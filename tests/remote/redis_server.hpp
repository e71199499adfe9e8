#pragma once
// A throwaway redis-server for the remote tests and the remote benchmark: 127.0.0.1, a free port, a
// temp directory, no persistence (--save '' --appendonly no). The server dies with the process that
// started it (PR_SET_PDEATHSIG), so a crashed or killed test never leaves one behind; the destructor
// stops it and removes the directory.
#include <hiredis/hiredis.h>

#include <sys/types.h>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

 private:
  std::filesystem::path m_dir;
  std::uint16_t m_port = 0;
  pid_t m_pid = -1;
  std::string m_password;
};

/// Runs a command on a context (binary-safe). nullptr on connection failure.
RedisReply redis_command(redisContext* context, const std::vector<std::string>& args);

/// Redirects this process's stderr into a file while alive; text() returns what was written.
class StderrCapture {
 public:
  StderrCapture();
  ~StderrCapture();
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  /// Everything written to stderr since construction.
  [[nodiscard]] std::string text() const;

 private:
  std::filesystem::path m_path;
  int m_saved = -1;
};

/// Occurrences of `needle` in `haystack`.
std::size_t count_occurrences(std::string_view haystack, std::string_view needle);

}  // namespace kiln::test
