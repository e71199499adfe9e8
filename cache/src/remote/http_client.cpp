// The HTTP tier's transport over a dlopen()ed libcurl (http_client.hpp).
#if KILN_HAVE_CURL_HEADERS

#include "http_client.hpp"

#include <curl/curl.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace kiln::cache::detail {

/// The libcurl functions kiln calls, looked up by name in the loaded library. The types are those of
/// <curl/curl.h> at build time; every one of these has been in libcurl's ABI (soname 4) since 7.17.
struct CurlApi {
  CURLcode (*global_init)(long flags) = nullptr;
  CURL* (*easy_init)() = nullptr;
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...) = nullptr;
  CURLcode (*easy_perform)(CURL*) = nullptr;
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...) = nullptr;
  void (*easy_cleanup)(CURL*) = nullptr;
  void (*easy_reset)(CURL*) = nullptr;
  const char* (*easy_strerror)(CURLcode) = nullptr;
  curl_slist* (*slist_append)(curl_slist*, const char*) = nullptr;
  void (*slist_free_all)(curl_slist*) = nullptr;
  char* (*version)() = nullptr;
};

namespace {

/// curl_global_init once per process (it is not thread-safe in older libcurl): under this mutex.
std::mutex g_global_init_mutex;
bool g_global_init_done = false;

template <class F>
bool look_up(void* library, const char* name, F& function, std::string& missing) {
  function = reinterpret_cast<F>(dlsym(library, name));
  if (function == nullptr) missing += missing.empty() ? name : fmt::format(", {}", name);
  return function != nullptr;
}

/// The body of a response as it arrives, bounded by a BodyLimit (http_client.hpp).
struct Sink {
  const CurlApi* api = nullptr;
  CURL* curl = nullptr;
  std::string* body = nullptr;
  const BodyLimit* limit = nullptr;
  bool started = false;  ///< the first bytes came (the status and Content-Length are known)
  bool keep = false;     ///< a 2xx body: kept; any other is read and dropped
  std::size_t dropped = 0;
  std::uint64_t end = 0;  ///< the most bytes kept: max_bytes, then the size the body declares
  bool declared = false;  ///< `end` is the body's own declared size
  bool too_large = false;
  std::string stopped;  ///< why the transfer was stopped on purpose
};

/// A status's body is not used: read this much of it (the connection stays usable), then stop.
constexpr std::size_t kIgnoredBodyBytes = 64 * 1024;

/// Stops the transfer on purpose (CURLE_WRITE_ERROR): `why` becomes HttpResponse::stopped.
std::size_t stop(Sink& sink, std::string why, bool too_large = false) {
  sink.stopped = std::move(why);
  sink.too_large = too_large;
  return 0;
}

std::size_t write_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const std::size_t bytes = size * count;
  try {
    if (!sink->started) {
      sink->started = true;
      long status = 0;
      sink->api->easy_getinfo(sink->curl, CURLINFO_RESPONSE_CODE, &status);
      sink->keep = status >= 200 && status < 300;
      sink->end = sink->limit->max_bytes;
      curl_off_t announced = -1;
      if (sink->keep &&
          sink->api->easy_getinfo(sink->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced) == CURLE_OK &&
          announced >= 0 && static_cast<std::uint64_t>(announced) > sink->end) {
        return stop(*sink, fmt::format("the server announced {} bytes, over the cap of {}", announced, sink->end),
                    true);
      }
    }
    if (!sink->keep) {
      sink->dropped += bytes;
      return sink->dropped > kIgnoredBodyBytes ? 0 : bytes;
    }
    std::string& body = *sink->body;
    if (body.size() + bytes > sink->end) {
      if (sink->declared) {
        return stop(*sink, fmt::format("the body goes on past the {} bytes its header declares", sink->end));
      }
      return stop(*sink, fmt::format("the body passed the cap of {} bytes", sink->end), true);
    }
    body.append(data, bytes);
    const BodyLimit& limit = *sink->limit;
    if (!sink->declared && limit.declared_size != nullptr && body.size() >= limit.head_bytes) {
      std::string why;
      const std::optional<std::uint64_t> total = limit.declared_size(body, why);
      if (!total) return stop(*sink, std::move(why));
      if (*total > limit.max_bytes) {
        return stop(*sink, fmt::format("its header declares {} bytes, over the cap of {}", *total, limit.max_bytes),
                    true);
      }
      curl_off_t announced = -1;
      if (sink->api->easy_getinfo(sink->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced) == CURLE_OK &&
          announced >= 0 && static_cast<std::uint64_t>(announced) != *total) {
        return stop(*sink, fmt::format("wrong size: the server announced {} bytes, the object header says {}",
                                       announced, *total));
      }
      if (body.size() > *total) {
        return stop(*sink, fmt::format("the body goes on past the {} bytes its header declares", *total));
      }
      sink->declared = true;
      sink->end = *total;
      body.reserve(static_cast<std::size_t>(*total));  // one allocation, not a doubling series
    }
    return bytes;
  } catch (...) {  // std::bad_alloc: stop the transfer, never unwind through libcurl
    return stop(*sink, "out of memory while reading the body");
  }
}

struct Source {
  std::span<const std::byte> bytes;
  std::size_t offset = 0;
};

std::size_t read_body(char* buffer, std::size_t size, std::size_t count, void* user) {
  auto* source = static_cast<Source*>(user);
  const std::size_t n = std::min(size * count, source->bytes.size() - source->offset);
  std::memcpy(buffer, source->bytes.data() + source->offset, n);
  source->offset += n;
  return n;
}

/// Frees a header list on every path out.
struct HeaderList {
  const CurlApi& api;
  curl_slist* list = nullptr;
  ~HeaderList() {
    if (list != nullptr) api.slist_free_all(list);
  }
  void add(const std::string& line) {
    curl_slist* grown = api.slist_append(list, line.c_str());
    if (grown != nullptr) list = grown;
  }
};

}  // namespace

HttpClient::HttpClient(const RemoteConfig& config)
    : m_config(config),
      m_origin(fmt::format("{}://{}{}{}:{}", config.tls ? "https" : "http",
                           config.host.find(':') != std::string::npos ? "[" : "", config.host,
                           config.host.find(':') != std::string::npos ? "]" : "", config.port)) {}

HttpClient::~HttpClient() {
  // The library stays loaded (libcurl keeps process-wide state): only the handles go.
  if (m_api) {
    for (void* handle : m_idle) m_api->easy_cleanup(static_cast<CURL*>(handle));
  }
}

bool HttpClient::load(std::string* why) {
  const std::lock_guard lock(m_mutex);
  if (!m_tried) {
    m_tried = true;
    void* library = dlopen(m_config.curl_library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* error = dlerror();
      m_load_error = fmt::format("libcurl could not be loaded ({}: {}); install libcurl4 (Debian) or "
                                 "libcurl (RHEL) to use an http(s) remote cache",
                                 m_config.curl_library, error != nullptr ? error : "dlopen failed");
    } else {
      auto api = std::make_unique<CurlApi>();
      std::string missing;
      look_up(library, "curl_global_init", api->global_init, missing);
      look_up(library, "curl_easy_init", api->easy_init, missing);
      look_up(library, "curl_easy_setopt", api->easy_setopt, missing);
      look_up(library, "curl_easy_perform", api->easy_perform, missing);
      look_up(library, "curl_easy_getinfo", api->easy_getinfo, missing);
      look_up(library, "curl_easy_cleanup", api->easy_cleanup, missing);
      look_up(library, "curl_easy_reset", api->easy_reset, missing);
      look_up(library, "curl_easy_strerror", api->easy_strerror, missing);
      look_up(library, "curl_slist_append", api->slist_append, missing);
      look_up(library, "curl_slist_free_all", api->slist_free_all, missing);
      look_up(library, "curl_version", api->version, missing);
      if (!missing.empty()) {
        m_load_error = fmt::format("{} is not a usable libcurl (missing {})", m_config.curl_library, missing);
      } else {
        const std::lock_guard init_lock(g_global_init_mutex);
        if (!g_global_init_done && api->global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
          m_load_error = fmt::format("{}: curl_global_init failed", m_config.curl_library);
        } else {
          g_global_init_done = true;
          m_library = library;
          m_api = std::move(api);
        }
      }
    }
  }
  if (!m_api && why != nullptr) *why = m_load_error;
  return m_api != nullptr;
}

std::string HttpClient::version() const {
  if (!m_api) return {};
  const char* text = m_api->version();  // "libcurl/7.88.1 OpenSSL/3.0.15 zlib/1.2.13 ...": the first word
  if (text == nullptr) return {};
  const std::string_view full(text);
  return std::string(full.substr(0, full.find(' ')));
}

void* HttpClient::take_handle() {
  {
    const std::lock_guard lock(m_mutex);
    if (!m_idle.empty()) {
      void* handle = m_idle.back();
      m_idle.pop_back();
      return handle;
    }
  }
  return m_api->easy_init();
}

void HttpClient::give_back(void* handle) {
  auto* curl = static_cast<CURL*>(handle);
  m_api->easy_reset(curl);  // forgets the options, keeps the connection for the next request
  {
    const std::lock_guard lock(m_mutex);
    if (m_idle.size() < std::max<std::size_t>(1, m_config.max_idle_connections)) {
      m_idle.push_back(handle);
      return;
    }
  }
  m_api->easy_cleanup(curl);
}

namespace {
/// What kiln reads of an answer to anything but GET: nothing it uses, a little to keep the connection.
constexpr BodyLimit kSmallBody{64 * 1024, 0, nullptr};
}  // namespace

HttpResponse HttpClient::get(const std::string& path, const BodyLimit& limit) {
  return perform(Method::get, path, {}, limit);
}
HttpResponse HttpClient::head(const std::string& path) { return perform(Method::head, path, {}, kSmallBody); }
HttpResponse HttpClient::put(const std::string& path, std::span<const std::byte> body) {
  return perform(Method::put, path, body, kSmallBody);
}
HttpResponse HttpClient::remove(const std::string& path) { return perform(Method::remove, path, {}, kSmallBody); }

HttpResponse HttpClient::perform(Method method, const std::string& path, std::span<const std::byte> body,
                                 const BodyLimit& limit) {
  HttpResponse response;
  if (!load(&response.error)) return response;
  const CurlApi& api = *m_api;
  auto* curl = static_cast<CURL*>(take_handle());
  if (curl == nullptr) {
    response.error = "curl_easy_init failed";
    return response;
  }
  char error_buffer[CURL_ERROR_SIZE] = {};
  const std::string url = m_origin + path;
  Sink sink;
  sink.api = &api;
  sink.curl = curl;
  sink.body = &response.body;
  sink.limit = &limit;
  Source source{body};
  HeaderList headers{api};
  headers.add("Expect:");  // no 100-continue round trip before a PUT's body
  if (!m_config.bearer_token.empty()) headers.add("Authorization: Bearer " + m_config.bearer_token);

  api.easy_setopt(curl, CURLOPT_URL, url.c_str());
  api.easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  api.easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
  api.easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(m_config.connect_timeout.count()));
  api.easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(m_config.operation_timeout.count()));
  api.easy_setopt(curl, CURLOPT_HTTPHEADER, headers.list);
  api.easy_setopt(curl, CURLOPT_WRITEFUNCTION, &write_body);
  api.easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  api.easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  api.easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, m_config.verify_tls ? 1L : 0L);
  api.easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, m_config.verify_tls ? 2L : 0L);
  if (!m_config.ca_file.empty()) api.easy_setopt(curl, CURLOPT_CAINFO, m_config.ca_file.c_str());
  if (!m_config.password.empty()) {
    api.easy_setopt(curl, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
    api.easy_setopt(curl, CURLOPT_USERNAME, m_config.user.c_str());
    api.easy_setopt(curl, CURLOPT_PASSWORD, m_config.password.c_str());
  }
  switch (method) {
    case Method::get:
      api.easy_setopt(curl, CURLOPT_HTTPGET, 1L);
      break;
    case Method::head:
      api.easy_setopt(curl, CURLOPT_NOBODY, 1L);
      break;
    case Method::put:
      api.easy_setopt(curl, CURLOPT_UPLOAD, 1L);
      api.easy_setopt(curl, CURLOPT_READFUNCTION, &read_body);
      api.easy_setopt(curl, CURLOPT_READDATA, &source);
      api.easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body.size()));
      break;
    case Method::remove:
      api.easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "DELETE");
      break;
  }

  const auto start = std::chrono::steady_clock::now();
  const CURLcode code = api.easy_perform(curl);
  response.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool dropped_body = code == CURLE_WRITE_ERROR && sink.started && !sink.keep;  // its beginning was enough
  if (code == CURLE_OK || (code == CURLE_WRITE_ERROR && !sink.stopped.empty()) || dropped_body) {
    long status = 0;
    api.easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    response.status = status;
    curl_off_t announced = -1;
    if (api.easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced) == CURLE_OK) {
      response.length = static_cast<std::int64_t>(announced);
    }
    response.too_large = sink.too_large;
    response.stopped = std::move(sink.stopped);
    response.answered = true;
    if (method == Method::get && status == 200 && response.stopped.empty()) {
      // A server that announced more than it sent makes libcurl fail (CURLE_PARTIAL_FILE); check the
      // other way too, so what is used is exactly what was announced.
      if (announced >= 0 && static_cast<std::uint64_t>(announced) != response.body.size()) {
        response.answered = false;
        response.error = fmt::format("the body is {} bytes, the server announced {}", response.body.size(), announced);
      }
    }
  } else {
    response.error = error_buffer[0] != '\0' ? std::string(error_buffer) : std::string(api.easy_strerror(code));
    if (code == CURLE_OPERATION_TIMEDOUT) response.error = fmt::format("timed out ({})", response.error);
  }
  give_back(curl);
  return response;
}

}  // namespace kiln::cache::detail

#endif  // KILN_HAVE_CURL_HEADERS
