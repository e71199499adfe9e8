#pragma once
// Private to cache/, built with libcurl's headers only: the HTTP tier's transport. libcurl is not
// linked: the first request dlopen()s RemoteConfig::curl_library ("libcurl.so.4") and looks up the few
// curl_easy_* functions used here, so libkiln runs on machines without it (the tier then reports
// itself unavailable, once). Requests reuse a small pool of easy handles, so a lookup costs one round
// trip on a kept-alive connection, not a connect.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache/remote.hpp"

namespace kiln::cache::detail {

struct CurlApi;  // the loaded library's functions (http_client.cpp)

/// How much of a GET's body is read. A hostile server must not make a lookup hold more than it could
/// use: the transfer stops as soon as the body is known to be unusable, and HttpResponse::stopped says
/// why. Only a 2xx body is kept; another status's body is read (so the connection stays usable) but not
/// kept, up to 64 KiB.
struct BodyLimit {
  /// The most bytes kept: a larger Content-Length is refused before any of the body is read, and a body
  /// without one (chunked) is stopped when it passes this.
  std::size_t max_bytes = 0;
  /// Optional: once the body's first `head_bytes` bytes have arrived, the size the body declares of
  /// itself (nullopt with `why`: refused there). A Content-Length that disagrees with it is refused, a
  /// declared size over max_bytes is too large, and the transfer stops at the declared size (a longer
  /// body is refused).
  std::size_t head_bytes = 0;
  std::optional<std::uint64_t> (*declared_size)(std::string_view head, std::string& why) = nullptr;
};

/// What one request got back.
struct HttpResponse {
  /// false: no HTTP answer (libcurl missing, connect failed, time-out, a cut transfer): `error` says why.
  bool answered = false;
  long status = 0;            ///< HTTP status when answered
  std::int64_t length = -1;   ///< the Content-Length the server announced (a HEAD's too); -1: none
  std::string body;           ///< GET: the body
  std::string error;          ///< why not answered
  bool too_large = false;     ///< GET: the body passed BodyLimit::max_bytes (announced, declared or sent)
  /// GET: why the body was not read to its end (too large, refused by its own header, longer than it
  /// declares); `status` is still the server's. Empty when the body was read whole.
  std::string stopped;
  double seconds = 0;         ///< time the request took
};

class HttpClient {
 public:
  /// Borrows `config` (it must outlive the client). Loads nothing yet.
  explicit HttpClient(const RemoteConfig& config);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// Loads libcurl if not yet tried. False (with `why`) when it cannot be loaded; the answer is kept.
  bool load(std::string* why);

  /// GET `path` (below scheme://host:port), its body bounded by `limit` (BodyLimit). A body shorter
  /// than the Content-Length the server announced is a failed transfer.
  [[nodiscard]] HttpResponse get(const std::string& path, const BodyLimit& limit);
  /// HEAD `path`.
  [[nodiscard]] HttpResponse head(const std::string& path);
  /// PUT `body` at `path`.
  [[nodiscard]] HttpResponse put(const std::string& path, std::span<const std::byte> body);
  /// DELETE `path`.
  [[nodiscard]] HttpResponse remove(const std::string& path);

  /// "libcurl/7.88.1 OpenSSL/3.0.15 ..." once loaded, else empty.
  [[nodiscard]] std::string version() const;

 private:
  enum class Method { get, head, put, remove };
  HttpResponse perform(Method method, const std::string& path, std::span<const std::byte> body, const BodyLimit& limit);
  void* take_handle();
  void give_back(void* handle);

  const RemoteConfig& m_config;
  const std::string m_origin;  ///< "https://host:port"
  std::mutex m_mutex;          ///< guards the fields below
  bool m_tried = false;
  std::string m_load_error;
  void* m_library = nullptr;
  std::unique_ptr<CurlApi> m_api;
  std::vector<void*> m_idle;  ///< idle CURL* handles
};

}  // namespace kiln::cache::detail
