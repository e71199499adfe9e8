#pragma once
// Private to cache/, built with hiredis only: connections to the remote tier's Redis server. A
// connection is opened with the configured timeouts, AUTH and SELECT; a pool keeps a few idle ones so a
// lookup costs one round trip, not a connect. Every failure of the server (no connection, no answer
// in time, authentication refused) is reported to the circuit breaker here, in one place.
#include <hiredis/hiredis.h>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "circuit_breaker.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/cache/remote.hpp"

namespace kiln::cache::detail {

struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* context) const noexcept { redisFree(context); }
};
using Context = std::unique_ptr<redisContext, ContextDeleter>;

/// A GET's value (or an MGET's first) parsed straight from hiredis's read buffer (no copy into a reply
/// object first): the entry can be as large as the entry size cap. Armed for one command by
/// ConnectionPool::run; the reply then holds an empty string in its place.
struct ValueSink {
  const Limits* limits = nullptr;
  /// With a secret, capture() also computes the value's MAC under it as the entry for `key`.
  const std::string* secret = nullptr;
  Hash128 key{};

  bool captured = false;
  std::size_t length = 0;
  std::variant<Entry, ContentError> parsed{ContentError{"not parsed"}};
  std::string mac;  ///< the MAC the value should carry (with a secret; empty if it could not be computed)

  /// Parses `size` bytes at `data` into `parsed` (a ContentError when they are not an entry) and
  /// computes `mac`.
  void capture(const char* data, std::size_t size) noexcept;
  /// Forgets what was captured; keeps limits, secret and key.
  void reset() noexcept;
};

/// A reply's text (string, status or error); empty when it has none.
[[nodiscard]] std::string_view text_of(const redisReply* reply) noexcept;
/// Why an error reply failed, worded for a one-time warning.
[[nodiscard]] std::string reply_error(std::string_view command_name, std::string_view text);

/// A new connection, or why there is none.
struct Connection {
  Context context;
  std::string error;
};
/// Connects (connect_timeout), sets the operation timeout, sends AUTH and SELECT as configured.
[[nodiscard]] Connection connect(const RemoteConfig& config);

/// Asks the server on a fresh connection (AUTH, SELECT, PING, INFO server), ignoring the pool and the
/// breaker. True when it answers; `detail` gets "redis 7.0.15, PONG in 0.30 ms" or why not.
[[nodiscard]] bool ping_server(const RemoteConfig& config, std::string& detail);

struct CommandResult {
  Reply reply;  ///< null: the command failed (error says why; already reported to the breaker)
  std::string error;
  /// The reply passed the entry cap (RemoteConfig::limits.max_file_bytes) and was not read: the value
  /// is refused, not the server (the breaker was not told). `reply` is null.
  bool too_large = false;
};

class ConnectionPool {
 public:
  /// Both are borrowed and must outlive the pool.
  ConnectionPool(const RemoteConfig& config, CircuitBreaker& breaker) : m_config(config), m_breaker(breaker) {}

  /// Runs one command on an idle connection or a new one; a reused connection that turns out dead is
  /// replaced once. A reply larger than the entry cap is not read (CommandResult::too_large). A failure
  /// is reported to the breaker; an error reply (other than an authentication error) is returned as a
  /// reply for the caller to judge. With `sink`, a top-level string reply goes to the sink.
  CommandResult run(std::initializer_list<std::string_view> args, ValueSink* sink = nullptr);
  /// Runs `commands` as one transaction (MULTI, the commands, EXEC), sent together in one round trip.
  /// The reply is EXEC's (an array of the commands' replies), or the first error reply the server
  /// gave to MULTI or while queueing. Failures and retries as run().
  CommandResult run_transaction(std::initializer_list<std::initializer_list<std::string_view>> commands);

 private:
  /// run()'s connection handling around `send`, which runs the command(s) on a context (nullptr: the
  /// connection failed).
  template <class Send>
  CommandResult execute(std::string_view command_name, ValueSink* sink, const Send& send);

  const RemoteConfig& m_config;
  CircuitBreaker& m_breaker;
  std::mutex m_mutex;  ///< guards m_idle
  std::vector<Context> m_idle;
};

}  // namespace kiln::cache::detail
