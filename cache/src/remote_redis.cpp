// The Redis remote tier (remote.hpp). URL and environment parsing are always compiled; the client
// needs hiredis (KILN_HAVE_HIREDIS) and is replaced by a stub that throws when it is missing.
#include "kiln/cache/remote.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <variant>

#include "kiln/base/log.hpp"

#ifndef KILN_HAVE_HIREDIS
#define KILN_HAVE_HIREDIS 0
#endif

#if KILN_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>
#endif

namespace kiln::cache {

// ---------------------------------------------------------------------------------------------------
// Configuration

namespace {

constexpr std::string_view kScheme = "redis://";

[[noreturn]] void bad_url(std::string_view url, std::string_view why) {
  throw std::invalid_argument(
      fmt::format("invalid remote cache URL \"{}\": {} (expected redis://[[user]:password@]host[:port][/db])",
                  redact_remote_url(url), why));
}

/// Parses decimal digits only (no sign, no spaces) up to `max`.
std::optional<std::uint64_t> parse_decimal(std::string_view text, std::uint64_t max) noexcept {
  if (text.empty() || text.size() > 20) return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value > max) return std::nullopt;
  return value;
}

int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// Decodes %XX escapes; nullopt for a malformed escape.
std::optional<std::string> percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int high = hex_digit(text[i + 1]);
    const int low = hex_digit(text[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    out.push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return out;
}

bool valid_host_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

bool valid_ipv6_char(char c) noexcept { return hex_digit(c) >= 0 || c == ':' || c == '.' || c == '%'; }

/// KILN_REMOTE_* as a whole number in [min, max]; nullopt when unset or empty.
std::optional<std::uint64_t> environment_number(const char* name, std::uint64_t min, std::uint64_t max) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  const auto number = parse_decimal(value, max);
  if (!number || *number < min) {
    throw std::invalid_argument(fmt::format("{}=\"{}\" is not a whole number from {} to {}", name, value, min, max));
  }
  return number;
}

}  // namespace

std::string redact_remote_url(std::string_view url) {
  const std::size_t scheme_end = url.find("://");
  const std::size_t start = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  const std::size_t at = url.rfind('@');
  if (at == std::string_view::npos || at < start) return std::string(url);
  const std::size_t colon = url.find(':', start);
  if (colon == std::string_view::npos || colon > at) {
    // No user: the whole user info may be a password.
    return fmt::format("{}***{}", url.substr(0, start), url.substr(at));
  }
  return fmt::format("{}***{}", url.substr(0, colon + 1), url.substr(at));
}

RemoteConfig parse_remote_url(std::string_view url) {
  if (url.starts_with("rediss://")) bad_url(url, "TLS (rediss://) is not supported; use redis://");
  if (!url.starts_with(kScheme)) bad_url(url, "the scheme must be redis://");
  RemoteConfig config;
  std::string_view rest = url.substr(kScheme.size());

  if (const std::size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view user_info = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const std::size_t colon = user_info.find(':');
    if (colon == std::string_view::npos) bad_url(url, "the user info must be user:password or :password");
    auto user = percent_decode(user_info.substr(0, colon));
    auto password = percent_decode(user_info.substr(colon + 1));
    if (!user || !password) bad_url(url, "malformed %-escape in the user info");
    if (password->empty()) bad_url(url, "the password is empty");
    config.user = std::move(*user);
    config.password = std::move(*password);
  }

  const std::size_t slash = rest.find('/');
  const std::string_view host_port = rest.substr(0, slash);
  const std::string_view path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  if (path.find_first_of("?#") != std::string_view::npos || host_port.find_first_of("?#") != std::string_view::npos) {
    bad_url(url, "query strings and fragments are not supported");
  }

  std::string_view host;
  std::optional<std::string_view> port_text;
  if (host_port.starts_with('[')) {
    const std::size_t close = host_port.find(']');
    if (close == std::string_view::npos) bad_url(url, "unterminated [ in an IPv6 host");
    host = host_port.substr(1, close - 1);
    const std::string_view after = host_port.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad_url(url, "unexpected text after the IPv6 host");
      port_text = after.substr(1);
    }
    if (host.empty() || !std::all_of(host.begin(), host.end(), valid_ipv6_char)) {
      bad_url(url, fmt::format("\"{}\" is not an IPv6 address", host));
    }
  } else {
    const std::size_t colon = host_port.find(':');
    if (colon != std::string_view::npos && host_port.find(':', colon + 1) != std::string_view::npos) {
      bad_url(url, "an IPv6 host must be written in brackets: redis://[::1]:6379");
    }
    host = host_port.substr(0, colon);
    if (colon != std::string_view::npos) port_text = host_port.substr(colon + 1);
    if (host.empty()) bad_url(url, "no host");
    if (!std::all_of(host.begin(), host.end(), valid_host_char)) {
      bad_url(url, fmt::format("\"{}\" is not a host name or address", host));
    }
  }
  config.host = std::string(host);

  if (port_text) {
    const auto port = parse_decimal(*port_text, 65535);
    if (!port || *port == 0) bad_url(url, fmt::format("port \"{}\" is not a number from 1 to 65535", *port_text));
    config.port = static_cast<std::uint16_t>(*port);
  }
  if (!path.empty()) {
    const auto db = parse_decimal(path, static_cast<std::uint64_t>(std::numeric_limits<int>::max()));
    if (!db) bad_url(url, fmt::format("database \"{}\" is not a whole number", path));
    config.db = static_cast<int>(*db);
  }
  return config;
}

RemoteConfig remote_config_from_environment(std::string_view url) {
  RemoteConfig config = parse_remote_url(url);
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  if (auto v = environment_number("KILN_REMOTE_CONNECT_TIMEOUT_MS", 1, 600000))
    config.connect_timeout = milliseconds(*v);
  if (auto v = environment_number("KILN_REMOTE_TIMEOUT_MS", 1, 600000)) config.operation_timeout = milliseconds(*v);
  if (auto v = environment_number("KILN_REMOTE_RETRY_S", 0, 86400)) config.retry_after = seconds(*v);
  if (auto v = environment_number("KILN_REMOTE_TTL", 0, 10ULL * 366 * 86400)) config.ttl = seconds(*v);
  if (auto v = environment_number("KILN_REMOTE_LEASE_WAIT_MS", 0, 3600000)) config.lease_wait = milliseconds(*v);
  return config;
}

std::string RemoteConfig::display() const {
  const std::string user_part = user.empty() ? std::string() : user + "@";
  const bool ipv6 = host.find(':') != std::string::npos;
  return fmt::format("redis://{}{}{}{}:{}/{}", user_part, ipv6 ? "[" : "", host, ipv6 ? "]" : "", port, db);
}

std::string RemoteConfig::entry_key(const Hash128& key) const { return key_prefix + key.hex(); }
std::string RemoteConfig::lease_key(const Hash128& key) const { return key_prefix + "lease:" + key.hex(); }

bool remote_supported() noexcept { return KILN_HAVE_HIREDIS != 0; }

#if !KILN_HAVE_HIREDIS

std::unique_ptr<RemoteTier> open_remote(const RemoteConfig& config) {
  throw std::runtime_error(
      fmt::format("remote cache {}: this kiln was built without the Redis client (hiredis); install libhiredis-dev and "
                  "reconfigure, or unset KILN_REMOTE_CACHE",
                  config.display()));
}

#else  // KILN_HAVE_HIREDIS

// ---------------------------------------------------------------------------------------------------
// The hiredis client

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* context) const noexcept { redisFree(context); }
};
using Context = std::unique_ptr<redisContext, ContextDeleter>;

timeval to_timeval(milliseconds ms) noexcept {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
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

/// Runs one command. nullptr when the connection failed (the context's err says why).
Reply command(redisContext* context, std::initializer_list<std::string_view> args) noexcept {
  std::array<const char*, 8> argv{};
  std::array<std::size_t, 8> lengths{};
  std::size_t argc = 0;
  for (const std::string_view arg : args) {
    if (argc == argv.size()) return nullptr;
    argv[argc] = arg.data();
    lengths[argc] = arg.size();
    ++argc;
  }
  const SigpipeGuard guard;
  return Reply(
      static_cast<redisReply*>(redisCommandArgv(context, static_cast<int>(argc), argv.data(), lengths.data())));
}

/// A GET's value parsed straight from hiredis's read buffer (no copy into a reply object first).
/// Armed for one command through the reader's privdata; see capture_functions().
struct ValueSink {
  const Limits* limits = nullptr;
  bool captured = false;
  std::size_t length = 0;
  std::variant<Entry, ContentError> parsed{ContentError{"not parsed"}};

  void capture(const char* data, std::size_t size) noexcept {
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
  }
};

/// hiredis's own reply functions, except that a top-level string read while a ValueSink is armed is
/// handed to the sink and answered with an empty string reply.
const redisReplyObjectFunctions* g_default_functions = nullptr;
redisReplyObjectFunctions g_capture_functions{};
std::once_flag g_capture_once;

void* create_string_or_capture(const redisReadTask* task, char* data, std::size_t size) {
  auto* sink = static_cast<ValueSink*>(task->privdata);
  if (sink != nullptr && task->parent == nullptr && task->type == REDIS_REPLY_STRING && !sink->captured) {
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

std::string_view text_of(const redisReply* reply) noexcept {
  if (reply->str == nullptr) return {};
  return {reply->str, reply->len};
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

/// Why an error reply failed, worded for a one-time warning.
std::string reply_error(std::string_view command_name, std::string_view text) {
  if (text.starts_with("NOAUTH")) {
    return fmt::format("authentication required: {} (put the password in KILN_REMOTE_CACHE)", text);
  }
  if (text.starts_with("NOPERM")) return fmt::format("permission denied for {}: {}", command_name, text);
  return fmt::format("{} failed: {}", command_name, text);
}

void add_max(std::atomic<std::uint64_t>& target, std::uint64_t value) noexcept {
  std::uint64_t current = target.load(std::memory_order_relaxed);
  while (value > current && !target.compare_exchange_weak(current, value, std::memory_order_relaxed)) {
  }
}

/// Sets an optional out-parameter; a failed allocation leaves it as it was.
void set_detail(std::string* detail, std::string_view text) noexcept {
  if (detail == nullptr) return;
  try {
    detail->assign(text);
  } catch (...) {
  }
}

std::string host_name() {
  std::array<char, 256> buffer{};
  if (gethostname(buffer.data(), buffer.size() - 1) != 0) return "unknown-host";
  return std::string(buffer.data());
}

/// A pooled connection keeps its reader buffer (as large as the largest reply it read); one that read
/// more than this is closed instead of pooled.
constexpr std::size_t kPooledReplyBytes = 4U << 20;

constexpr std::string_view kReleaseScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
constexpr std::string_view kRenewScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";

class RedisTier final : public RemoteTier {
 public:
  explicit RedisTier(RemoteConfig config)
      : m_config(std::move(config)),
        m_display(m_config.display()),
        m_host(host_name()),
        m_worker([this] { run_worker(); }) {}

  ~RedisTier() override {
    {
      const std::lock_guard lock(m_mutex);
      m_stop = true;
      m_close_deadline = Clock::now() + m_config.close_flush;
    }
    m_wake.notify_all();
    m_worker.join();
  }

  RedisTier(const RedisTier&) = delete;
  RedisTier& operator=(const RedisTier&) = delete;

  [[nodiscard]] std::string describe() const override {
    return fmt::format("redis {}", std::string_view(m_display).substr(kScheme.size()));
  }

  [[nodiscard]] const RemoteConfig& config() const noexcept override { return m_config; }

  [[nodiscard]] Counters counters() const noexcept override {
    Counters counters;
    counters.remote_hits = m_hits.load(std::memory_order_relaxed);
    counters.remote_misses = m_misses.load(std::memory_order_relaxed);
    counters.remote_errors = m_errors.load(std::memory_order_relaxed);
    return counters;
  }

  [[nodiscard]] RemoteStats remote_stats() const noexcept override {
    RemoteStats s;
    s.hits = m_hits.load();
    s.misses = m_misses.load();
    s.failures = m_failures.load();
    s.skipped = m_skipped.load();
    s.rejected = m_rejected.load();
    s.published = m_published.load();
    s.publish_dropped = m_publish_dropped.load();
    s.leases_taken = m_leases_taken.load();
    s.lease_waits = m_lease_waits.load();
    s.lease_wait_hits = m_lease_wait_hits.load();
    s.get_nanoseconds = m_get_ns.load();
    s.get_max_nanoseconds = m_get_max_ns.load();
    return s;
  }

  [[nodiscard]] LookupResult get(const Hash128& key, std::string_view canonical_key) override {
    const std::int64_t start = now_ns();
    LookupResult result;
    try {
      result = lookup(key, canonical_key);
    } catch (...) {  // std::bad_alloc: answer io_error, never fail the request
      result.outcome = LookupOutcome::io_error;
      result.entry.reset();
      result.detail.clear();
    }
    switch (result.outcome) {
      case LookupOutcome::hit:
        m_hits.fetch_add(1, std::memory_order_relaxed);
        break;
      case LookupOutcome::miss:
        m_misses.fetch_add(1, std::memory_order_relaxed);
        break;
      default:
        m_errors.fetch_add(1, std::memory_order_relaxed);
        break;
    }
    const auto elapsed = static_cast<std::uint64_t>(std::max<std::int64_t>(0, now_ns() - start));
    m_get_ns.fetch_add(elapsed, std::memory_order_relaxed);
    add_max(m_get_max_ns, elapsed);
    return result;
  }

  void publish(const Entry& entry) noexcept override {
    try {
      if (breaker_open()) {
        m_publish_dropped.fetch_add(1, std::memory_order_relaxed);
        request_release(entry.key_hash);
        return;
      }
      if (!queue_has_room(0)) {
        drop_publish(entry.key_hash, "the publish queue is full");
        return;
      }
      std::vector<std::byte> bytes = serialize(entry);
      {
        const std::lock_guard lock(m_mutex);
        if (!m_stop && m_queue.size() < m_config.publish_queue_entries &&
            m_queued_bytes + bytes.size() <= m_config.publish_queue_bytes) {
          m_queued_bytes += bytes.size();
          m_queue.push_back(Job{entry.key_hash, std::move(bytes)});
          m_wake.notify_all();
          return;
        }
      }
      drop_publish(entry.key_hash, "the publish queue is full");
    } catch (...) {
      m_publish_dropped.fetch_add(1, std::memory_order_relaxed);
    }
  }

  bool ping(std::string* detail) noexcept override {
    try {
      Connection connection = connect();
      if (!connection.context) {
        if (detail) *detail = connection.error;
        return false;
      }
      redisContext* context = connection.context.get();
      const auto start = Clock::now();
      const Reply pong = command(context, {"PING"});
      const auto elapsed = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      if (!pong || pong->type == REDIS_REPLY_ERROR) {
        if (detail)
          *detail =
              pong ? reply_error("PING", text_of(pong.get())) : transport_error(context, m_config.operation_timeout);
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
      succeed();
      if (detail) *detail = fmt::format("{}, {} in {:.2f} ms", version, text_of(pong.get()), elapsed);
      return true;
    } catch (const std::exception& e) {
      set_detail(detail, e.what());
      return false;
    }
  }

  bool put(const Entry& entry, std::string* detail) noexcept override {
    try {
      if (!admit()) {
        set_detail(detail, fmt::format("not asked: it failed less than {} s ago", m_config.retry_after.count()));
        return false;
      }
      const std::vector<std::byte> bytes = serialize(entry);
      std::string why;
      const bool ok = write_entry(entry.key_hash, bytes, &why);
      if (!ok) set_detail(detail, why);
      release_lease(entry.key_hash);
      return ok;
    } catch (const std::exception& e) {
      set_detail(detail, e.what());
      return false;
    }
  }

  bool flush(milliseconds max_wait) noexcept override {
    try {
      std::unique_lock lock(m_mutex);
      return m_idle.wait_for(lock, max_wait, [this] { return m_queue.empty() && !m_writing; });
    } catch (...) {
      return false;
    }
  }

  void abandon(const Hash128& key) noexcept override { request_release(key); }

  bool remove(const Hash128& key) noexcept override {
    try {
      const std::string name = m_config.entry_key(key);
      const Result result = run({"DEL", name});
      return result.reply && result.reply->type == REDIS_REPLY_INTEGER;
    } catch (...) {
      return false;
    }
  }

 private:
  struct Job {
    Hash128 key;
    std::vector<std::byte> bytes;
  };
  struct Lease {
    std::string token;
    Clock::time_point taken;
    bool release = false;
  };
  struct Connection {
    Context context;
    std::string error;
  };
  struct Result {
    Reply reply;  ///< null: the command failed (error says why; already reported)
    std::string error;
  };
  enum class LeaseAttempt { taken, busy, failed };

  // --- circuit breaker ------------------------------------------------------------------------------

  /// True when the breaker is open and the retry time has not come.
  [[nodiscard]] bool breaker_open() const noexcept {
    const std::int64_t until = m_open_until.load(std::memory_order_acquire);
    return until != 0 && now_ns() < until;
  }

  /// Whether to ask the server. While the breaker is open: no, except one caller per retry period.
  bool admit() noexcept {
    std::int64_t until = m_open_until.load(std::memory_order_acquire);
    if (until == 0) return true;
    const std::int64_t now = now_ns();
    if (now < until) {
      m_skipped.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    const std::int64_t retry = std::chrono::duration_cast<std::chrono::nanoseconds>(m_config.retry_after).count();
    if (m_open_until.compare_exchange_strong(until, now + std::max<std::int64_t>(retry, 1))) return true;
    m_skipped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }

  void fail(std::string_view why) noexcept {
    const std::int64_t retry = std::chrono::duration_cast<std::chrono::nanoseconds>(m_config.retry_after).count();
    m_open_until.store(now_ns() + std::max<std::int64_t>(retry, 1), std::memory_order_release);
    m_failures.fetch_add(1, std::memory_order_relaxed);
    try {
      report_failure(why);
    } catch (...) {  // std::bad_alloc while formatting: the warning is lost, nothing else
    }
  }

  void report_failure(std::string_view why) {
    if (!m_outage.exchange(true)) {
      while (why.ends_with('.') || why.ends_with(' ')) why.remove_suffix(1);
      const std::string when = m_config.retry_after.count() > 0
                                   ? fmt::format("not asking it again for {} s", m_config.retry_after.count())
                                   : std::string("asking again on the next lookup");
      KILN_LOG(warn, "remote cache {}: {}; {} (the local cache and compiles carry on)", m_display, why, when);
    } else {
      KILN_LOG(debug, "remote cache {}: {}", m_display, why);
    }
  }

  void succeed() noexcept {
    if (m_open_until.load(std::memory_order_relaxed) != 0) m_open_until.store(0, std::memory_order_release);
    if (!m_outage.exchange(false)) return;
    try {
      KILN_LOG(info, "remote cache {}: answering again", m_display);
    } catch (...) {
    }
  }

  // --- connections ----------------------------------------------------------------------------------

  /// A new connection: connect (connect_timeout), set the operation timeout, AUTH, SELECT.
  Connection connect() const {
    Context context(
        redisConnectWithTimeout(m_config.host.c_str(), m_config.port, to_timeval(m_config.connect_timeout)));
    if (!context) return {nullptr, "cannot allocate a hiredis context"};
    if (context->err != 0) {
      const std::string_view text(context->errstr);
      if (text.find("timed out") != std::string_view::npos) {
        return {nullptr, fmt::format("no connection within {} ms", m_config.connect_timeout.count())};
      }
      return {nullptr, fmt::format("cannot connect: {}", text)};
    }
    if (redisSetTimeout(context.get(), to_timeval(m_config.operation_timeout)) != REDIS_OK) {
      return {nullptr, fmt::format("cannot set the operation timeout: {}", context->errstr)};
    }
    // Keep the reader's buffer between replies: without this, every large GET frees and regrows it
    // (and the allocator trims and refaults the pages). run() drops a connection whose buffer grew
    // past kPooledReplyBytes, so idle connections hold little memory.
    context->reader->maxbuf = 0;
    install_capture(context.get());
    if (!m_config.password.empty()) {
      const Reply reply = m_config.user.empty() ? command(context.get(), {"AUTH", m_config.password})
                                                : command(context.get(), {"AUTH", m_config.user, m_config.password});
      if (!reply) return {nullptr, transport_error(context.get(), m_config.operation_timeout)};
      if (reply->type == REDIS_REPLY_ERROR) {
        return {nullptr, fmt::format("authentication failed: {}", text_of(reply.get()))};
      }
    }
    if (m_config.db != 0) {
      const std::string db = std::to_string(m_config.db);
      const Reply reply = command(context.get(), {"SELECT", db});
      if (!reply) return {nullptr, transport_error(context.get(), m_config.operation_timeout)};
      if (reply->type == REDIS_REPLY_ERROR)
        return {nullptr, reply_error(fmt::format("SELECT {}", db), text_of(reply.get()))};
    }
    return {std::move(context), {}};
  }

  /// Runs one command on a pooled connection (a reused connection that turns out dead is replaced
  /// once). A failure is reported to the breaker; an error reply is returned as a reply.
  Result run(std::initializer_list<std::string_view> args, ValueSink* sink = nullptr) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      Context context;
      {
        const std::lock_guard lock(m_pool_mutex);
        if (!m_pool.empty()) {
          context = std::move(m_pool.back());
          m_pool.pop_back();
        }
      }
      const bool reused = context != nullptr;
      if (!reused) {
        Connection connection = connect();
        if (!connection.context) {
          fail(connection.error);
          return {nullptr, std::move(connection.error)};
        }
        context = std::move(connection.context);
      }
      if (sink != nullptr) *sink = ValueSink{sink->limits};
      context->reader->privdata = sink;
      Reply reply = command(context.get(), args);
      context->reader->privdata = nullptr;
      if (!reply) {
        const bool timed_out = context->err == REDIS_ERR_IO &&
                               std::string_view(context->errstr).find("temporarily") != std::string_view::npos;
        std::string why = transport_error(context.get(), m_config.operation_timeout);
        if (reused && !timed_out && attempt == 0) continue;  // stale pooled connection: try a fresh one
        fail(why);
        return {nullptr, std::move(why)};
      }
      if (reply->type == REDIS_REPLY_ERROR && is_auth_error(text_of(reply.get()))) {
        std::string why = reply_error(*args.begin(), text_of(reply.get()));
        fail(why);
        return {nullptr, std::move(why)};
      }
      const std::size_t reply_bytes = sink != nullptr && sink->captured ? sink->length : reply->len;
      if (reply_bytes <= kPooledReplyBytes) {
        const std::lock_guard lock(m_pool_mutex);
        if (m_pool.size() < m_config.max_idle_connections) m_pool.push_back(std::move(context));
      }
      return {std::move(reply), {}};
    }
    return {nullptr, "unreachable"};
  }

  // --- lookups --------------------------------------------------------------------------------------

  enum class Found { entry, absent, rejected, failed };
  struct Fetched {
    Found found = Found::absent;
    LookupResult result;
  };

  LookupResult lookup(const Hash128& key, std::string_view canonical_key) {
    if (!admit()) {
      return {LookupOutcome::io_error, std::nullopt,
              fmt::format("remote cache {} not asked: it failed less than {} s ago", m_display,
                          m_config.retry_after.count())};
    }
    const std::string name = m_config.entry_key(key);
    Fetched fetched = fetch(key, name, canonical_key);
    if (fetched.found != Found::absent || m_config.lease_wait.count() == 0) return std::move(fetched.result);
    return lease_or_wait(key, name, canonical_key);
  }

  /// One GET, verified.
  Fetched fetch(const Hash128& key, const std::string& name, std::string_view canonical_key) {
    ValueSink sink{&m_config.limits};
    Result result = run({"GET", name}, &sink);
    if (!result.reply) {
      return {Found::failed,
              {LookupOutcome::io_error, std::nullopt, fmt::format("remote cache {}: {}", m_display, result.error)}};
    }
    const redisReply* reply = result.reply.get();
    if (reply->type == REDIS_REPLY_NIL) {
      succeed();
      return {Found::absent, {LookupOutcome::miss, std::nullopt, {}}};
    }
    if (reply->type == REDIS_REPLY_ERROR && !text_of(reply).starts_with("WRONGTYPE")) {
      const std::string why = reply_error("GET", text_of(reply));
      fail(why);
      return {Found::failed,
              {LookupOutcome::io_error, std::nullopt, fmt::format("remote cache {}: {}", m_display, why)}};
    }
    succeed();
    std::string why;
    if (reply->type == REDIS_REPLY_STRING && !sink.captured) sink.capture(reply->str, reply->len);
    if (reply->type != REDIS_REPLY_STRING) {
      why = "the key does not hold a string value";
    } else {
      auto& parsed = sink.parsed;
      if (auto* error = std::get_if<ContentError>(&parsed)) {
        why = error->reason;
      } else {
        Entry& entry = std::get<Entry>(parsed);
        if (entry.key_hash != key) {
          why = fmt::format("foreign entry for key {}", entry.key_hash.hex());
        } else if (entry.canonical_key != canonical_key) {
          why = "foreign entry: its canonical key differs from the request's";
        } else {
          return {Found::entry, {LookupOutcome::hit, std::move(entry), {}}};
        }
      }
    }
    result.reply.reset();
    const Result deleted = run({"DEL", name});
    m_rejected.fetch_add(1, std::memory_order_relaxed);
    KILN_LOG(warn, "remote cache {}: rejected the value under {} ({}); {} it, compiling instead", m_display, name, why,
             deleted.reply ? "deleted" : "could not delete");
    return {Found::rejected,
            {LookupOutcome::corrupt_removed, std::nullopt, fmt::format("remote cache {}: {}", m_display, why)}};
  }

  LeaseAttempt try_lease(const Hash128& key, const std::string& lease_name) {
    const std::string token = fmt::format("{}:{}:{}", m_host, ::getpid(), m_lease_serial.fetch_add(1) + 1);
    const std::string ttl = std::to_string(std::max<std::int64_t>(1, m_config.lease_ttl.count()));
    const Result result = run({"SET", lease_name, token, "NX", "PX", ttl});
    if (!result.reply) return LeaseAttempt::failed;
    if (result.reply->type == REDIS_REPLY_NIL) return LeaseAttempt::busy;
    if (result.reply->type == REDIS_REPLY_ERROR) {
      fail(reply_error("SET NX (compile lease)", text_of(result.reply.get())));
      return LeaseAttempt::failed;
    }
    const std::lock_guard lock(m_mutex);
    m_leases[key] = Lease{token, Clock::now(), false};
    return LeaseAttempt::taken;
  }

  LookupResult lease_or_wait(const Hash128& key, const std::string& name, std::string_view canonical_key) {
    const std::string lease_name = m_config.lease_key(key);
    const auto deadline = Clock::now() + m_config.lease_wait;
    bool waited = false;
    milliseconds poll{2};
    for (;;) {
      switch (try_lease(key, lease_name)) {
        case LeaseAttempt::taken: {
          // The entry may have been written between our GET and the lease (its compiler released the
          // lease right after): look once more before compiling it again.
          Fetched fetched = fetch(key, name, canonical_key);
          if (fetched.found == Found::absent) {
            m_leases_taken.fetch_add(1, std::memory_order_relaxed);
            return {LookupOutcome::miss, std::nullopt, {}};
          }
          release_lease(key);
          if (fetched.found == Found::entry && waited) m_lease_wait_hits.fetch_add(1, std::memory_order_relaxed);
          return std::move(fetched.result);
        }
        case LeaseAttempt::failed:
          return {LookupOutcome::io_error, std::nullopt,
                  fmt::format("remote cache {}: compile lease failed", m_display)};
        case LeaseAttempt::busy:
          break;
      }
      if (!waited) {
        waited = true;
        m_lease_waits.fetch_add(1, std::memory_order_relaxed);
        KILN_LOG(debug, "remote cache {}: a peer is compiling {}; waiting for its entry", m_display, key.hex());
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        KILN_LOG(info, "remote cache {}: waited {} ms for a peer to compile {}; compiling here", m_display,
                 m_config.lease_wait.count(), key.hex());
        return {LookupOutcome::miss, std::nullopt, {}};
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(poll, deadline - now));
      poll = std::min(poll * 2, milliseconds(50));
      Fetched fetched = fetch(key, name, canonical_key);
      if (fetched.found == Found::entry) m_lease_wait_hits.fetch_add(1, std::memory_order_relaxed);
      if (fetched.found != Found::absent) return std::move(fetched.result);
    }
  }

  // --- publishing -----------------------------------------------------------------------------------

  bool queue_has_room(std::size_t bytes) const {
    const std::lock_guard lock(m_mutex);
    return !m_stop && m_queue.size() < m_config.publish_queue_entries &&
           m_queued_bytes + bytes <= m_config.publish_queue_bytes;
  }

  void drop_publish(const Hash128& key, std::string_view why) noexcept {
    m_publish_dropped.fetch_add(1, std::memory_order_relaxed);
    try {
      KILN_LOG(debug, "remote cache {}: entry {} not published: {}", m_display, key.hex(), why);
    } catch (...) {
    }
    request_release(key);
  }

  /// SET (with EX ttl). Reports failures to the breaker.
  bool write_entry(const Hash128& key, std::span<const std::byte> bytes, std::string* why) {
    const std::string name = m_config.entry_key(key);
    const std::string_view value(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const std::string ttl = std::to_string(m_config.ttl.count());
    const Result result = m_config.ttl.count() > 0 ? run({"SET", name, value, "EX", ttl}) : run({"SET", name, value});
    if (!result.reply) {
      if (why) *why = result.error;
      m_publish_dropped.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (result.reply->type == REDIS_REPLY_ERROR) {
      std::string error = reply_error("SET", text_of(result.reply.get()));
      fail(error);
      if (why) *why = std::move(error);
      m_publish_dropped.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    succeed();
    m_published.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  void request_release(const Hash128& key) noexcept {
    try {
      const std::lock_guard lock(m_mutex);
      if (auto it = m_leases.find(key); it != m_leases.end()) {
        it->second.release = true;
        m_wake.notify_all();
      }
    } catch (...) {  // std::system_error from the mutex: the lease expires by itself
    }
  }

  /// Releases the lease for `key` now if this tier holds it (compare-and-delete).
  void release_lease(const Hash128& key) {
    std::string token;
    {
      const std::lock_guard lock(m_mutex);
      auto it = m_leases.find(key);
      if (it == m_leases.end()) return;
      token = std::move(it->second.token);
      m_leases.erase(it);
    }
    if (breaker_open()) return;  // it expires by itself
    const std::string name = m_config.lease_key(key);
    (void)run({"EVAL", kReleaseScript, "1", name, token});
  }

  /// Renews held leases (so a long compile keeps its lease) and releases those marked for release.
  /// A lease held longer than lease_wait is no longer renewed: peers stop waiting then anyway.
  void maintain_leases() {
    std::vector<std::pair<Hash128, std::string> > renew;
    std::vector<Hash128> release;
    {
      const std::lock_guard lock(m_mutex);
      const auto now = Clock::now();
      for (auto it = m_leases.begin(); it != m_leases.end();) {
        if (it->second.release) {
          release.push_back(it->first);
          ++it;
        } else if (now - it->second.taken > m_config.lease_wait) {
          it = m_leases.erase(it);
        } else {
          renew.emplace_back(it->first, it->second.token);
          ++it;
        }
      }
    }
    for (const Hash128& key : release) release_lease(key);
    if (breaker_open()) return;
    const std::string ttl = std::to_string(std::max<std::int64_t>(1, m_config.lease_ttl.count()));
    for (const auto& [key, token] : renew) {
      const std::string name = m_config.lease_key(key);
      (void)run({"EVAL", kRenewScript, "1", name, token, ttl});
    }
  }

  void run_worker() noexcept {
    const milliseconds renew_every = std::max(milliseconds(10), m_config.lease_ttl / 3);
    auto next_renew = Clock::now() + renew_every;
    std::unique_lock lock(m_mutex);
    for (;;) {
      const bool release_pending =
          std::any_of(m_leases.begin(), m_leases.end(), [](const auto& lease) { return lease.second.release; });
      if (!m_queue.empty() && !(m_stop && Clock::now() >= m_close_deadline)) {
        Job job = std::move(m_queue.front());
        m_queue.pop_front();
        m_queued_bytes -= job.bytes.size();
        m_writing = true;
        lock.unlock();
        try {
          if (admit()) {
            (void)write_entry(job.key, job.bytes, nullptr);
          } else {
            m_publish_dropped.fetch_add(1, std::memory_order_relaxed);
          }
          release_lease(job.key);
        } catch (...) {
          m_publish_dropped.fetch_add(1, std::memory_order_relaxed);
        }
        lock.lock();
        m_writing = false;
        if (m_queue.empty()) m_idle.notify_all();
        continue;
      }
      if (m_stop) break;
      if (release_pending || Clock::now() >= next_renew) {
        lock.unlock();
        try {
          maintain_leases();
        } catch (...) {
        }
        lock.lock();
        next_renew = Clock::now() + renew_every;
        continue;
      }
      m_wake.wait_until(lock, next_renew);
    }
    // Closing: drop what could not be written in time, then free every lease still held.
    m_publish_dropped.fetch_add(m_queue.size(), std::memory_order_relaxed);
    m_queue.clear();
    m_queued_bytes = 0;
    m_idle.notify_all();
    for (auto& lease : m_leases) lease.second.release = true;
    lock.unlock();
    try {
      maintain_leases();
    } catch (...) {
    }
  }

  const RemoteConfig m_config;
  const std::string m_display;
  const std::string m_host;

  std::atomic<std::int64_t> m_open_until{0};  ///< steady-clock ns; 0 = breaker closed
  std::atomic<bool> m_outage{false};          ///< a warning was printed for the current outage

  std::mutex m_pool_mutex;
  std::vector<Context> m_pool;

  mutable std::mutex m_mutex;  ///< guards the queue, the leases and the worker state
  std::condition_variable m_wake;
  std::condition_variable m_idle;
  std::deque<Job> m_queue;
  std::uint64_t m_queued_bytes = 0;
  bool m_writing = false;
  bool m_stop = false;
  Clock::time_point m_close_deadline{};
  std::unordered_map<Hash128, Lease, Hash128Hasher> m_leases;
  std::atomic<std::uint64_t> m_lease_serial{0};

  std::atomic<std::uint64_t> m_hits{0}, m_misses{0}, m_errors{0}, m_failures{0}, m_skipped{0}, m_rejected{0},
      m_published{0}, m_publish_dropped{0}, m_leases_taken{0}, m_lease_waits{0}, m_lease_wait_hits{0}, m_get_ns{0},
      m_get_max_ns{0};

  std::thread m_worker;  ///< last: starts after every member above exists
};

}  // namespace

std::unique_ptr<RemoteTier> open_remote(const RemoteConfig& config) {
  if (config.host.empty()) throw std::invalid_argument("remote cache: no host configured");
  return std::make_unique<RedisTier>(config);
}

#endif  // KILN_HAVE_HIREDIS

}  // namespace kiln::cache
