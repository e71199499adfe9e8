// Connections to the remote tier's Redis server (redis_connection.hpp).
#if KILN_HAVE_HIREDIS

#include "redis_connection.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>

#include "remote_mac.hpp"

namespace kiln::cache::detail {

namespace {

using std::chrono::milliseconds;

/// What a value's reply may hold beyond the value itself: an MGET's array header, the MAC element and
/// the length lines.
constexpr std::uint64_t kReplyFramingBytes = 4096;

/// A connection keeps its reader buffer (as large as the largest reply it read); one that read more
/// than this is closed instead of going back to the pool, so idle connections hold little memory.
constexpr std::size_t kPooledReplyBytes = 4U << 20;

timeval to_timeval(milliseconds ms) noexcept {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

/// hiredis writes with write(2): a peer that closed the socket raises SIGPIPE, which would kill the
/// process. While a command runs, SIGPIPE is blocked in this thread and one raised by it is consumed.
class SigpipeGuard {
 public:
  SigpipeGuard() noexcept {
    sigemptyset(&m_pipe);
    sigaddset(&m_pipe, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    m_was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    m_blocked = pthread_sigmask(SIG_BLOCK, &m_pipe, &m_old) == 0;
  }
  ~SigpipeGuard() {
    if (!m_blocked) return;
    if (!m_was_pending) {
      sigset_t pending;
      sigemptyset(&pending);
      if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{};
        while (sigtimedwait(&m_pipe, nullptr, &zero) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &m_old, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t m_pipe{};
  sigset_t m_old{};
  bool m_was_pending = false;
  bool m_blocked = false;
};

/// A command's arguments as hiredis takes them.
struct Argv {
  std::array<const char*, 8> argv{};
  std::array<std::size_t, 8> lengths{};
  int argc = 0;

  /// False when there are more arguments than kiln ever sends.
  bool assign(std::initializer_list<std::string_view> args) noexcept {
    if (args.size() > argv.size()) return false;
    for (const std::string_view arg : args) {
      argv[static_cast<std::size_t>(argc)] = arg.data();
      lengths[static_cast<std::size_t>(argc)] = arg.size();
      ++argc;
    }
    return true;
  }
};

/// Runs one command. nullptr when the connection failed (the context's err says why).
Reply command(redisContext* context, std::initializer_list<std::string_view> args) noexcept {
  Argv argv;
  if (!argv.assign(args)) return nullptr;
  const SigpipeGuard guard;
  return Reply(static_cast<redisReply*>(redisCommandArgv(context, argv.argc, argv.argv.data(), argv.lengths.data())));
}

/// The length a bulk string reply announces ("$<n>\r\n"), once its header has arrived; nullopt
/// otherwise. hiredis takes the type byte ('$') off and leaves its cursor before the length until the
/// whole string has arrived, so this is the length of the value being read (a GET's, or an MGET's
/// element): the reader's current task says it is a string.
std::optional<std::uint64_t> pending_bulk_length(const redisReader* reader) noexcept {
  if (reader->ridx < 0) return std::nullopt;
#if HIREDIS_MAJOR >= 1
  const int type = reader->task[reader->ridx]->type;
#else
  const int type = reader->rstack[reader->ridx].type;
#endif
  if (type != REDIS_REPLY_STRING) return std::nullopt;
  std::string_view unread(reader->buf + reader->pos, reader->len - reader->pos);
  if (unread.starts_with('$')) unread.remove_prefix(1);  // should a reader leave the type byte
  std::uint64_t length = 0;
  for (std::size_t i = 0; i < unread.size() && i < 21; ++i) {
    const char c = unread[i];
    if (c == '\r') return i == 0 ? std::nullopt : std::optional<std::uint64_t>(length);
    if (c < '0' || c > '9') return std::nullopt;  // "-1" (nil) or malformed: hiredis judges it
    length = length * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return std::nullopt;
}

/// Runs one command as command() does, but reads its reply itself so that a reply larger than
/// `max_bytes` is never held: one that announces a longer string, or whose unread bytes pass the cap,
/// is read no further (`too_large`; nullptr: the connection is mid-reply and must be closed). hiredis
/// itself would buffer a bulk string of any length the server announces.
Reply capped_command(redisContext* context, std::initializer_list<std::string_view> args, std::uint64_t max_bytes,
                     bool& too_large) noexcept {
  Argv argv;
  if (!argv.assign(args)) return nullptr;
  const SigpipeGuard guard;
  if (redisAppendCommandArgv(context, argv.argc, argv.argv.data(), argv.lengths.data()) != REDIS_OK) return nullptr;
  for (int done = 0; !done;) {
    if (redisBufferWrite(context, &done) != REDIS_OK) return nullptr;
  }
  for (;;) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(context, &raw) != REDIS_OK) return nullptr;
    if (raw != nullptr) return Reply(static_cast<redisReply*>(raw));
    const redisReader* reader = context->reader;
    const std::optional<std::uint64_t> announced = pending_bulk_length(reader);
    if ((announced && *announced > max_bytes) || reader->len - reader->pos > max_bytes) {
      too_large = true;
      return nullptr;
    }
    if (redisBufferRead(context) != REDIS_OK) return nullptr;
  }
}

/// Sends MULTI, `commands` and EXEC together, then reads every reply (so the connection stays in step
/// whatever they are). EXEC's reply, or the first error reply before it; nullptr when the connection
/// failed.
Reply transaction(redisContext* context,
                  std::initializer_list<std::initializer_list<std::string_view>> commands) noexcept {
  const SigpipeGuard guard;
  std::size_t sent = 0;
  const auto append = [&](std::initializer_list<std::string_view> args) {
    Argv argv;
    if (!argv.assign(args) ||
        redisAppendCommandArgv(context, argv.argc, argv.argv.data(), argv.lengths.data()) != REDIS_OK) {
      return false;
    }
    ++sent;
    return true;
  };
  if (!append({"MULTI"})) return nullptr;
  for (const auto& args : commands) {
    if (!append(args)) return nullptr;
  }
  if (!append({"EXEC"})) return nullptr;
  Reply first_error;
  Reply last;
  for (std::size_t i = 0; i < sent; ++i) {
    void* raw = nullptr;
    if (redisGetReply(context, &raw) != REDIS_OK) return nullptr;
    Reply reply(static_cast<redisReply*>(raw));
    if (i + 1 < sent && reply && reply->type == REDIS_REPLY_ERROR && !first_error) first_error = std::move(reply);
    if (i + 1 == sent) last = std::move(reply);
  }
  return first_error ? std::move(first_error) : std::move(last);
}

/// hiredis's own reply functions, except that the value read while a ValueSink is armed (a top-level
/// string, or the first element of a top-level array) is handed to the sink and answered with an empty
/// string reply.
const redisReplyObjectFunctions* g_default_functions = nullptr;
redisReplyObjectFunctions g_capture_functions{};
std::once_flag g_capture_once;

void* create_string_or_capture(const redisReadTask* task, char* data, std::size_t size) {
  auto* sink = static_cast<ValueSink*>(task->privdata);
  // The value: a top-level string (GET) or the first element of a top-level array (MGET).
  const bool value = task->parent == nullptr || (task->parent->parent == nullptr && task->idx == 0);
  if (sink != nullptr && value && task->type == REDIS_REPLY_STRING && !sink->captured) {
    sink->capture(data, size);
    return g_default_functions->createString(task, data, 0);
  }
  return g_default_functions->createString(task, data, size);
}

/// Installs the capturing reply functions on a new context's reader.
void install_capture(redisContext* context) {
  std::call_once(g_capture_once, [context] {
    g_default_functions = context->reader->fn;
    g_capture_functions = *g_default_functions;
    g_capture_functions.createString = create_string_or_capture;
  });
  if (context->reader->fn == g_default_functions) context->reader->fn = &g_capture_functions;
}

/// A failed command's reason, from the context.
std::string transport_error(const redisContext* context, milliseconds timeout) {
  const std::string_view text(context->errstr);
  if (context->err == REDIS_ERR_IO && (text.find("temporarily unavailable") != std::string_view::npos ||
                                       text.find("timed out") != std::string_view::npos)) {
    return fmt::format("no answer within {} ms", timeout.count());
  }
  if (context->err == REDIS_ERR_EOF) return "the server closed the connection";
  return text.empty() ? fmt::format("hiredis error {}", context->err) : std::string(text);
}

bool is_auth_error(std::string_view text) noexcept {
  return text.starts_with("NOAUTH") || text.starts_with("WRONGPASS") || text.starts_with("NOPERM") ||
         (text.starts_with("ERR") && text.find("AUTH") != std::string_view::npos);
}

}  // namespace

void ValueSink::capture(const char* data, std::size_t size) noexcept {
  captured = true;
  length = size;
  try {
    if (size > limits->max_file_bytes) {
      parsed = ContentError{fmt::format("{} bytes exceed the entry size cap of {}", size, limits->max_file_bytes)};
    } else {
      parsed = parse(std::span(reinterpret_cast<const std::byte*>(data), size), *limits);
    }
  } catch (const std::exception& e) {  // std::bad_alloc
    parsed = ContentError{fmt::format("cannot parse: {}", e.what())};
  }
  if (secret != nullptr) {
    try {
      mac = entry_mac(*secret, key, data, size);
    } catch (...) {  // std::bad_alloc: no MAC, so the value is refused
      mac.clear();
    }
  }
}

void ValueSink::reset() noexcept {
  captured = false;
  length = 0;
  parsed = ContentError{"not parsed"};
  mac.clear();
}

std::string_view text_of(const redisReply* reply) noexcept {
  if (reply->str == nullptr) return {};
  return {reply->str, reply->len};
}

std::string reply_error(std::string_view command_name, std::string_view text) {
  if (text.starts_with("NOAUTH")) {
    return fmt::format("authentication required: {} (put the password in KILN_REMOTE_CACHE)", text);
  }
  if (text.starts_with("NOPERM")) return fmt::format("permission denied for {}: {}", command_name, text);
  return fmt::format("{} failed: {}", command_name, text);
}

Connection connect(const RemoteConfig& config) {
  Context context(redisConnectWithTimeout(config.host.c_str(), config.port, to_timeval(config.connect_timeout)));
  if (!context) return {nullptr, "cannot allocate a hiredis context"};
  if (context->err != 0) {
    const std::string_view text(context->errstr);
    if (text.find("timed out") != std::string_view::npos) {
      return {nullptr, fmt::format("no connection within {} ms", config.connect_timeout.count())};
    }
    return {nullptr, fmt::format("cannot connect: {}", text)};
  }
  if (redisSetTimeout(context.get(), to_timeval(config.operation_timeout)) != REDIS_OK) {
    return {nullptr, fmt::format("cannot set the operation timeout: {}", context->errstr)};
  }
  // Keep the reader's buffer between replies: without this, every large GET frees and regrows it
  // (and the allocator trims and refaults the pages). The pool drops a connection whose buffer grew
  // past kPooledReplyBytes.
  context->reader->maxbuf = 0;
  install_capture(context.get());
  if (!config.password.empty()) {
    const Reply reply = config.user.empty() ? command(context.get(), {"AUTH", config.password})
                                            : command(context.get(), {"AUTH", config.user, config.password});
    if (!reply) return {nullptr, transport_error(context.get(), config.operation_timeout)};
    if (reply->type == REDIS_REPLY_ERROR) {
      return {nullptr, fmt::format("authentication failed: {}", text_of(reply.get()))};
    }
  }
  if (config.db != 0) {
    const std::string db = std::to_string(config.db);
    const Reply reply = command(context.get(), {"SELECT", db});
    if (!reply) return {nullptr, transport_error(context.get(), config.operation_timeout)};
    if (reply->type == REDIS_REPLY_ERROR)
      return {nullptr, reply_error(fmt::format("SELECT {}", db), text_of(reply.get()))};
  }
  return {std::move(context), {}};
}

bool ping_server(const RemoteConfig& config, std::string& detail) {
  Connection connection = connect(config);
  if (!connection.context) {
    detail = std::move(connection.error);
    return false;
  }
  redisContext* context = connection.context.get();
  const auto start = std::chrono::steady_clock::now();
  const Reply pong = command(context, {"PING"});
  const auto elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!pong || pong->type == REDIS_REPLY_ERROR) {
    detail = pong ? reply_error("PING", text_of(pong.get())) : transport_error(context, config.operation_timeout);
    return false;
  }
  std::string version = "redis";
  if (const Reply info = command(context, {"INFO", "server"}); info && info->type == REDIS_REPLY_STRING) {
    const std::string_view text = text_of(info.get());
    constexpr std::string_view kField = "redis_version:";
    if (const std::size_t at = text.find(kField); at != std::string_view::npos) {
      const std::size_t end = text.find_first_of("\r\n", at);
      version = fmt::format("redis {}", text.substr(at + kField.size(), end - at - kField.size()));
    }
  }
  detail = fmt::format("{}, {} in {:.2f} ms", version, text_of(pong.get()), elapsed);
  return true;
}

CommandResult ConnectionPool::run(std::initializer_list<std::string_view> args, ValueSink* sink) {
  // The value and, with a secret, its MAC (an MGET's second element) and the array around them.
  const std::uint64_t max_bytes = m_config.limits.max_file_bytes + kReplyFramingBytes;
  return execute(*args.begin(), sink, [args, max_bytes](redisContext* context, bool& too_large) {
    return capped_command(context, args, max_bytes, too_large);
  });
}

CommandResult ConnectionPool::run_transaction(std::initializer_list<std::initializer_list<std::string_view>> commands) {
  // EXEC answers a status per SET: nothing large.
  return execute("MULTI", nullptr, [commands](redisContext* context, bool&) { return transaction(context, commands); });
}

template <class Send>
CommandResult ConnectionPool::execute(std::string_view command_name, ValueSink* sink, const Send& send) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    Context context;
    {
      const std::lock_guard lock(m_mutex);
      if (!m_idle.empty()) {
        context = std::move(m_idle.back());
        m_idle.pop_back();
      }
    }
    const bool reused = context != nullptr;
    if (!reused) {
      Connection connection = connect(m_config);
      if (!connection.context) {
        m_breaker.fail(connection.error);
        return {nullptr, std::move(connection.error)};
      }
      context = std::move(connection.context);
    }
    if (sink != nullptr) sink->reset();
    context->reader->privdata = sink;
    bool too_large = false;
    Reply reply = send(context.get(), too_large);
    context->reader->privdata = nullptr;
    if (too_large) {
      // The value, not the server, is at fault: no breaker. The connection (mid-reply) is closed here.
      return {nullptr,
              fmt::format("{} answered a value larger than the remote entry cap of {} bytes (KILN_REMOTE_MAX_ENTRY_MB)",
                          command_name, m_config.limits.max_file_bytes),
              true};
    }
    if (!reply) {
      const bool timed_out = context->err == REDIS_ERR_IO &&
                             std::string_view(context->errstr).find("temporarily") != std::string_view::npos;
      std::string why = transport_error(context.get(), m_config.operation_timeout);
      if (reused && !timed_out && attempt == 0) continue;  // stale pooled connection: try a fresh one
      m_breaker.fail(why);
      return {nullptr, std::move(why)};
    }
    if (reply->type == REDIS_REPLY_ERROR && is_auth_error(text_of(reply.get()))) {
      std::string why = reply_error(command_name, text_of(reply.get()));
      m_breaker.fail(why);
      return {nullptr, std::move(why)};
    }
    const std::size_t reply_bytes = sink != nullptr && sink->captured ? sink->length : reply->len;
    if (reply_bytes <= kPooledReplyBytes) {
      const std::lock_guard lock(m_mutex);
      if (m_idle.size() < m_config.max_idle_connections) m_idle.push_back(std::move(context));
    }
    return {std::move(reply), {}};
  }
  return {nullptr, "unreachable"};
}

}  // namespace kiln::cache::detail

#endif  // KILN_HAVE_HIREDIS
