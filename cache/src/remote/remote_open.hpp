#pragma once
// Private to cache/: the table of remote backends (remote_open.cpp), which parse_remote_url() and
// open_remote() consult, and what each backend's files give it: a URL parser and a constructor.
#include <array>
#include <memory>
#include <span>
#include <string_view>

#include "kiln/cache/remote.hpp"

namespace kiln::cache::detail {

/// One row of the table: everything the shared code needs to know of a backend.
struct RemoteBackend {
  std::string_view name;  ///< what its tiers' RemoteTier::backend() answers: "redis", "http"
  RemoteKind kind;        ///< RemoteConfig::kind of the URLs it parses
  /// The URL prefixes it takes ("redis://"; "http://" and "https://"), named in the error for a URL that
  /// no backend takes. Empty views are unused slots.
  std::array<std::string_view, 2> schemes;
  /// A prefix it claims only to refuse with a reason of its own ("rediss://": TLS is not supported);
  /// not named among the schemes. Empty: none.
  std::string_view refuses;
  std::string_view form;  ///< the URL's form, for the error: "redis://[[user]:password@]host[:port][/db]"
  RemoteConfig (*parse)(std::string_view url);                      ///< throws std::invalid_argument
  bool (*supported)() noexcept;                                     ///< whether this build has its client
  std::unique_ptr<RemoteTier> (*open)(const RemoteConfig& config);  ///< throws std::runtime_error without it
};

/// Every backend, in the order their schemes are named in messages.
[[nodiscard]] std::span<const RemoteBackend> remote_backends() noexcept;

/// The Redis backend's URL parser (remote_url.cpp): redis://[[user]:password@]host[:port][/db].
[[nodiscard]] RemoteConfig parse_redis_url(std::string_view url);
/// The HTTP backend's URL parser (remote_url.cpp): http(s)://[user@]host[:port][/path][?layout=...].
[[nodiscard]] RemoteConfig parse_http_url(std::string_view url);

/// The Redis tier (remote_tier.cpp); throws std::runtime_error in a build without hiredis.
[[nodiscard]] std::unique_ptr<RemoteTier> open_redis_remote(const RemoteConfig& config);
/// The HTTP tier (remote_http.cpp); throws std::runtime_error in a build without libcurl's headers.
[[nodiscard]] std::unique_ptr<RemoteTier> open_http_remote(const RemoteConfig& config);

}  // namespace kiln::cache::detail
