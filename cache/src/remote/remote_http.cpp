// The HTTP remote tier (remote.hpp, RemoteKind::http): one self-authenticating object per entry
// (remote_object.hpp) at RemoteConfig::object_path(), read with GET, written with PUT (after a HEAD
// that finds it already there saves the upload), refused entries deleted with DELETE where the server
// allows it. The same rules as the Redis tier: a failure never fails a request (the circuit breaker,
// one warning per outage), a value is used only once its MAC (with a fleet secret), its size, parse()
// and its key check out, publish() only queues. What it cannot do: hold a compile lease (plain PUT has
// no "set if absent with expiry"), so fleet compile-once stays with a Redis tier in the chain.
// The shell it shares with the Redis tier (counters, stats, refusals, the frames of get and
// get_manifest) is RemoteTierBase (remote_base.hpp), its background thread a PublishThread
// (publish_queue.hpp). Without libcurl's headers at build time (KILN_HAVE_CURL_HEADERS=0) opening one
// throws. The backend's row in the table of backends is in remote_open.cpp.
#ifndef KILN_HAVE_CURL_HEADERS
#error "KILN_HAVE_CURL_HEADERS must be 0 or 1 (set by cache/Optional.cmake)"
#endif

#include <fmt/format.h>

#include <stdexcept>

#include "kiln/cache/remote.hpp"
#include "remote_open.hpp"

#if KILN_HAVE_CURL_HEADERS
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <unordered_set>
#include <utility>
#include <vector>

#include "circuit_breaker.hpp"
#include "http_client.hpp"
#include "publish_queue.hpp"
#include "kiln/base/log.hpp"
#include "kiln/base/sha256.hpp"
#include "remote_base.hpp"
#include "remote_mac.hpp"
#include "remote_manifest.hpp"
#include "remote_object.hpp"
#endif

namespace kiln::cache {

bool http_remote_supported() noexcept { return KILN_HAVE_CURL_HEADERS != 0; }

#if !KILN_HAVE_CURL_HEADERS

std::unique_ptr<RemoteTier> detail::open_http_remote(const RemoteConfig& config) {
  throw std::runtime_error(fmt::format(
      "remote cache {}: this kiln was built without libcurl's headers (libcurl4-openssl-dev); reconfigure with "
      "them, or use a redis:// tier",
      config.display()));
}

#else  // KILN_HAVE_CURL_HEADERS

namespace {

using detail::CircuitBreaker;
using detail::HttpClient;
using detail::HttpResponse;
using detail::PublishJob;
using detail::PublishThread;
using detail::RemoteTierBase;
using detail::set_detail;

/// Why a status that is neither a hit nor a miss failed, worded for the breaker's one warning.
std::string status_error(std::string_view method, long status) {
  if (status == 401 || status == 403) {
    return fmt::format("{} answered HTTP {}: the server refused the credentials (KILN_REMOTE_HTTP_TOKEN_FILE, "
                       "KILN_REMOTE_HTTP_USER and KILN_REMOTE_HTTP_PASSWORD_FILE)",
                       method, status);
  }
  if (status == 405 || status == 501) {
    return fmt::format("{} answered HTTP {}: the server does not take this method (nginx: dav_methods PUT DELETE)",
                       method, status);
  }
  if (method == "PUT" && status == 500) {
    // What nginx answers for a PUT it cannot write (its error log says "Permission denied"); said here, since the
    // breaker then skips the tier and the rest of a prewarm publishes nothing.
    return fmt::format("PUT answered HTTP {}: the server failed to store the object (nginx: the folder under "
                       "`root` must be writable by the user its workers run as, the `user` directive)",
                       status);
  }
  return fmt::format("{} answered HTTP {}", method, status);
}

/// True the first time this process asks for `display`: a process that opens a tier twice (kiln devices:
/// the engine's, then one to ask) says once that its TLS verification is off.
bool first_insecure_warning(const std::string& display) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  const std::lock_guard lock(mutex);
  return warned.insert(display).second;
}

class HttpTier final : public RemoteTierBase, private PublishThread::Writer {
 public:
  explicit HttpTier(RemoteConfig config)
      : RemoteTierBase(std::move(config)), m_client(m_config), m_thread(m_config, *this) {
    if (!m_config.verify_tls && m_config.tls && first_insecure_warning(m_display)) {
      KILN_LOG(warn, "remote cache {}: TLS certificate verification is off (KILN_REMOTE_HTTP_INSECURE=1): anyone on "
               "the path can serve or read this tier{}",
               m_display, m_config.authenticated() ? "" : ", and entries are not authenticated either");
    }
  }

  ~HttpTier() override { close(Clock::now() + m_config.close_flush); }

  [[nodiscard]] std::string_view backend() const noexcept override { return "http"; }
  /// A plain PUT has no "set if absent with expiry": fleet compile-once stays with a Redis tier.
  [[nodiscard]] bool fleet_lease() const noexcept override { return false; }

  void close(std::chrono::steady_clock::time_point deadline) noexcept override { m_thread.close(deadline); }

  void publish(const Entry& entry) noexcept override {
    try {
      if (m_breaker.is_open() || !usable()) {
        m_thread.count_dropped();
        return;
      }
      if (m_thread.push(entry.key_hash, RemoteValue::entry, [&entry] { return serialize(entry); })) return;
      m_thread.count_dropped();
      KILN_LOG(debug, "remote cache {}: entry {} not published: the publish queue is full", m_display,
               entry.key_hash.hex());
    } catch (...) {
      m_thread.count_dropped();
    }
  }

  bool ping(std::string* detail) noexcept override {
    try {
      std::string why;
      if (!m_client.load(&why)) {
        set_detail(detail, why);
        return false;
      }
      // A HEAD of a name no entry has: any answer but a refusal or a server error means it serves.
      const HttpResponse response = m_client.head(m_config.object_path(Hash128{}));
      if (!response.answered) {
        set_detail(detail, response.error);
        return false;
      }
      // No node writes an object under the zero key: a 200 for it means the server answers every path
      // (a web page in place of the cache, or the URL's path is wrong), which would serve only garbage.
      const bool every_path = response.status >= 200 && response.status < 300;
      const bool ok = !every_path && (response.status < 400 || response.status == 404);
      if (ok) m_breaker.succeed();
      set_detail(detail, ok           ? fmt::format("HTTP {} in {:.2f} ms, {}, layout {}", response.status,
                                                    response.seconds * 1000, m_client.version(), to_string(m_config.layout))
                         : every_path ? fmt::format("HEAD of an object no node writes answered HTTP {}: the server "
                                                    "answers every path (is the URL's path the cache's?)",
                                                    response.status)
                                      : status_error("HEAD", response.status));
      return ok;
    } catch (const std::exception& e) {
      set_detail(detail, e.what());
      return false;
    }
  }

  bool put(const Entry& entry, std::string* detail) noexcept override {
    return put_now(entry.key_hash, RemoteValue::entry, [&entry] { return serialize(entry); }, detail);
  }

  void publish_manifest(const Hash128& request_key, std::span<const std::byte> bytes) noexcept override {
    // A manifest dropped costs a resolve on another node, never an error: not counted, said at debug level.
    try {
      if (!m_breaker.is_open() && usable() &&
          m_thread.push(detail::manifest_object_key(request_key), RemoteValue::manifest,
                        [bytes] { return std::vector<std::byte>(bytes.begin(), bytes.end()); })) {
        return;
      }
      KILN_LOG(debug, "remote cache {}: dependency manifest of {} not published (the server failed moments ago, or "
               "the publish queue is full)", m_display, request_key.hex());
    } catch (...) {
    }
  }

  bool put_manifest(const Hash128& request_key, std::span<const std::byte> bytes, std::string* detail) noexcept override {
    return put_now(detail::manifest_object_key(request_key), RemoteValue::manifest, [bytes] { return bytes; }, detail);
  }

  bool flush(std::chrono::milliseconds max_wait) noexcept override { return m_thread.wait_idle(max_wait); }

  bool remove(const Hash128& key) noexcept override {
    try {
      if (!m_client.load(nullptr)) return false;
      const HttpResponse response = m_client.remove(m_config.object_path(key));
      return response.answered && (response.status < 300 || response.status == 404);
    } catch (...) {
      return false;
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  using RemoteValue = detail::RemoteValue;

  /// put() and put_manifest(): one write now, without HEAD first; `make` gives the bytes once the server
  /// may be asked. False with `detail` when it was not written. Never throws.
  template <class Make>
  bool put_now(const Hash128& key, RemoteValue what, const Make& make, std::string* detail) noexcept {
    try {
      std::string why;
      if (!m_client.load(&why)) {
        set_detail(detail, why);
        return false;
      }
      if (!m_breaker.admit()) {
        set_detail(detail, not_asked());
        return false;
      }
      const auto bytes = make();
      const bool ok = write(key, std::span<const std::byte>(bytes), &why, false, what);
      if (!ok) set_detail(detail, why);
      return ok;
    } catch (const std::exception& e) {
      set_detail(detail, e.what());
      return false;
    }
  }

  /// False when libcurl cannot be loaded: said once, then this tier is skipped.
  bool usable() {
    std::string why;
    if (m_client.load(&why)) return true;
    if (!m_warned_unloaded.exchange(true)) {
      KILN_LOG(warn, "remote cache {}: {}; continuing without this tier", m_display, why);
    }
    return false;
  }

  /// What one GET of an object found (filled in place: `payload` views into `response`).
  struct Fetch {
    /// garbage: the server answered 200 with something that is not a kiln object of the size it says
    /// within the cap (HTML, random bytes, a wrong size): the server is failing (the breaker was told),
    /// and the object is deleted where it can be. unauthenticated: a well-formed object without the
    /// fleet's MAC.
    enum class Kind { failed, absent, garbage, unauthenticated, value } kind = Kind::failed;
    std::string path;          ///< the object's
    HttpResponse response;     ///< holds the body
    std::string_view payload;  ///< value: the entry's (or manifest's) bytes, MAC verified with a secret
    std::string why;           ///< failed: the lookup's detail; garbage: why the body is not an object
    bool had_mac = false;      ///< unauthenticated: it had a MAC (a wrong one)
  };

  /// One GET of the object of `key`, taken apart (remote_object.hpp) and, with a secret, its MAC
  /// (under `what`'s label) verified before anything else is believed: a value without the fleet's MAC
  /// may have been planted. Server failures are told to the breaker.
  void fetch_object(const Hash128& key, RemoteValue what, Fetch& out) {
    out.path = m_config.object_path(key);
    if (!usable()) {
      m_unloaded.fetch_add(1, std::memory_order_relaxed);
      out.why = fmt::format("remote cache {}: libcurl is not loaded", m_display);
      return;
    }
    if (!m_breaker.admit()) {
      out.why = fmt::format("remote cache {} not asked: it failed less than {} s ago", m_display,
                            m_config.retry_after.count());
      return;
    }
    // The body is read only while it can still be an object: a Content-Length over the cap is refused
    // before any of it arrives, and the object's own header (its first 24 bytes) is checked first, so
    // a hostile server costs a lookup at most the cap, never what it chooses to send.
    detail::BodyLimit limit;
    limit.max_bytes = detail::kObjectHeaderBytes + static_cast<std::size_t>(m_config.limits.max_file_bytes);
    limit.head_bytes = detail::kObjectSizeBytes;
    limit.declared_size = &detail::declared_object_size;
    out.response = m_client.get(out.path, limit);
    const HttpResponse& response = out.response;
    if (!response.answered) {
      m_breaker.fail(fmt::format("GET: {}", response.error));
      out.why = fmt::format("remote cache {}: {}", m_display, response.error);
      return;
    }
    if (response.status == 404) {
      m_breaker.succeed();
      out.kind = Fetch::Kind::absent;
      return;
    }
    if (response.status != 200) {
      const std::string why = status_error("GET", response.status);
      m_breaker.fail(why);
      out.why = fmt::format("remote cache {}: {}", m_display, why);
      return;
    }
    std::string garbage = response.stopped;
    detail::Unframed object;
    if (garbage.empty()) {
      object = detail::unframe_object(response.body);
      garbage = object.error;
    }
    if (!garbage.empty()) {
      // Not a server's honest answer for an object kiln wrote: a server that answers HTML or anything
      // for every path must cost one warning per outage and be skipped, not warn for each object.
      m_breaker.fail(fmt::format("GET {} answered HTTP 200 with what is not a kiln object: {}", out.path, garbage));
      out.kind = Fetch::Kind::garbage;
      out.why = std::move(garbage);
      return;
    }
    m_breaker.succeed();
    if (m_config.authenticated()) {
      const std::string expected =
          detail::remote_mac(m_config.secret, what, key, object.entry.data(), object.entry.size());
      if (!object.has_mac() || !kiln::detail::constant_time_equal(object.mac, expected)) {
        out.kind = Fetch::Kind::unauthenticated;
        out.had_mac = object.has_mac();
        return;
      }
    }
    out.kind = Fetch::Kind::value;
    out.payload = object.entry;
  }

  void add_stats(RemoteStats& s) const noexcept override {
    s.skipped += m_unloaded.load();
    s.published = m_thread.published();
    s.publish_dropped = m_thread.dropped();
  }

  LookupResult lookup(const Hash128& key, std::string_view canonical_key, bool& refused_unauthenticated) override {
    Fetch fetched;
    fetch_object(key, RemoteValue::entry, fetched);
    const std::string& path = fetched.path;
    switch (fetched.kind) {
      case Fetch::Kind::failed:
        return {LookupOutcome::io_error, std::nullopt, std::move(fetched.why)};
      case Fetch::Kind::absent:
        return {LookupOutcome::miss, std::nullopt, {}};
      case Fetch::Kind::garbage:
        return refuse_garbage(key, path, fetched.why);
      case Fetch::Kind::unauthenticated: {
        const bool deleted = delete_refused(key, path);
        return unauthenticated(fmt::format("the object at {}", path), key, fetched.had_mac, deleted,
                               refused_unauthenticated);
      }
      case Fetch::Kind::value:
        break;
    }
    const std::string_view bytes = fetched.payload;
    auto parsed = parse(std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()), m_config.limits);
    if (auto* error = std::get_if<ContentError>(&parsed)) return reject(key, path, error->reason);
    Entry& entry = std::get<Entry>(parsed);
    if (entry.key_hash != key) return reject(key, path, fmt::format("foreign entry for key {}", entry.key_hash.hex()));
    if (entry.canonical_key != canonical_key) {
      return reject(key, path, "foreign entry: its canonical key differs from the request's");
    }
    return {LookupOutcome::hit, std::move(entry), {}};
  }

  /// The manifest of `request_key`: one GET of its object, the MAC first (fetch_object), then the caller's
  /// check (ManifestCheck). What fails is deleted where the server allows it.
  ManifestFetch fetch_manifest(const Hash128& request_key, const ManifestCheck& check) override {
    using Outcome = ManifestFetch::Outcome;
    Fetch fetched;
    fetch_object(detail::manifest_object_key(request_key), RemoteValue::manifest, fetched);
    std::string why;
    switch (fetched.kind) {
      case Fetch::Kind::failed:
        return {Outcome::error, {}, std::move(fetched.why)};
      case Fetch::Kind::absent:
        return {Outcome::miss, {}, {}};
      case Fetch::Kind::garbage:
        why = std::move(fetched.why);
        break;
      case Fetch::Kind::unauthenticated:
        why = fetched.had_mac ? "its MAC is wrong" : "it has no MAC";
        break;
      case Fetch::Kind::value: {
        const std::span bytes(reinterpret_cast<const std::byte*>(fetched.payload.data()), fetched.payload.size());
        why = check(bytes);
        if (why.empty()) return {Outcome::hit, std::vector<std::byte>(bytes.begin(), bytes.end()), {}};
        break;
      }
    }
    const HttpResponse deleted = m_client.remove(fetched.path);
    return refused_manifest(fetched.path, why, deleted.answered && deleted.status < 300);
  }

  /// Deletes a refused object where the server allows it, and remembers the key: its next publish
  /// overwrites without asking HEAD first (a server that refuses DELETE still has the bad object).
  bool delete_refused(const Hash128& key, const std::string& path) {
    {
      const std::lock_guard lock(m_mutex);
      if (m_refused.size() < 4096) m_refused.insert(key);
    }
    const HttpResponse deleted = m_client.remove(path);
    return deleted.answered && deleted.status < 300;
  }

  LookupResult reject(const Hash128& key, const std::string& path, std::string_view why) {
    const bool deleted = delete_refused(key, path);
    return rejected(fmt::format("the object at {}", path), why, deleted);
  }

  /// A body that is not a kiln object (the breaker was told, and warns once per outage): deleted where
  /// the server allows it, counted as rejected, said at debug level only.
  LookupResult refuse_garbage(const Hash128& key, const std::string& path, std::string_view why) {
    const bool deleted = delete_refused(key, path);
    KILN_LOG(debug, "remote cache {}: refused the answer for {} ({}); {} it", m_display, path, why,
             deleted ? "deleted" : "could not delete");
    return rejected_quietly(why);
  }

  /// Writes one entry: HEAD first when `ask_first` (an object already there is not uploaded again,
  /// unless this process refused what was there), then PUT. False with `why` when the server failed,
  /// which the breaker is told.
  /// A manifest (`what`) is written the same way, its MAC under its own label, counted apart.
  bool write(const Hash128& key, std::span<const std::byte> bytes, std::string* why, bool ask_first,
             RemoteValue what = RemoteValue::entry) {
    const bool entry = what == RemoteValue::entry;
    const std::string path = m_config.object_path(key);
    bool refused_before = false;
    {
      const std::lock_guard lock(m_mutex);
      refused_before = m_refused.erase(key) > 0;
    }
    const auto fail = [&](std::string text) {
      m_breaker.fail(text);
      if (entry) m_thread.count_dropped();
      if (why) *why = std::move(text);
      return false;
    };
    if (ask_first && !refused_before) {
      const HttpResponse present = m_client.head(path);
      if (!present.answered) return fail(fmt::format("HEAD: {}", present.error));
      // What is there is this object only if it has the object's size (every writer frames the same
      // bytes): a server that answers 200 for every path (an HTML page) has not got it.
      const auto object_size = static_cast<std::int64_t>(detail::kObjectHeaderBytes + bytes.size());
      if (present.status == 200 && (present.length < 0 || present.length == object_size)) {
        m_breaker.succeed();
        m_thread.count_published();  // the server has it
        return true;
      }
      if (present.status != 404 && present.status != 200) return fail(status_error("HEAD", present.status));
    }
    const std::string object = detail::frame_object(bytes, key, m_config.secret, what);
    const HttpResponse response =
        m_client.put(path, std::span(reinterpret_cast<const std::byte*>(object.data()), object.size()));
    if (!response.answered) return fail(fmt::format("PUT: {}", response.error));
    if (response.status < 200 || response.status >= 300) return fail(status_error("PUT", response.status));
    m_breaker.succeed();
    if (entry) {
      m_thread.count_published();
    } else {
      m_manifests.published.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
  }


  // PublishThread::Writer: one queued job. A manifest is always uploaded (what one name holds changes as
  // results are recorded); an entry asks HEAD first.
  void write_job(PublishJob& job) noexcept override {
    const bool entry = job.what == RemoteValue::entry;
    try {
      if (m_breaker.admit()) {
        (void)write(job.key, job.bytes, nullptr, entry, job.what);
      } else if (entry) {
        m_thread.count_dropped();
      }
    } catch (...) {
      if (entry) m_thread.count_dropped();
    }
  }

  HttpClient m_client;
  std::atomic<std::uint64_t> m_unloaded{0};  ///< lookups not sent: libcurl could not be loaded
  std::atomic<bool> m_warned_unloaded{false};
  std::mutex m_mutex;                                    ///< guards m_refused
  std::unordered_set<Hash128, Hash128Hasher> m_refused;  ///< keys whose object this process refused
  PublishThread m_thread;  ///< last: its thread starts after every member above exists
};

}  // namespace

std::unique_ptr<RemoteTier> detail::open_http_remote(const RemoteConfig& config) {
  return std::make_unique<HttpTier>(config);
}

#endif  // KILN_HAVE_CURL_HEADERS

}  // namespace kiln::cache
