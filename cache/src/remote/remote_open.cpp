// The table of remote backends: a URL's scheme picks the row whose parser reads it, a configuration's
// kind picks the row whose constructor opens it (remote_open.hpp). Nothing else in kiln names a backend:
// the storage front end, the engine and the CLI see RemoteTier (its backend(), fleet_lease(), describe()).
#include "remote_open.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::cache {

namespace detail {

namespace {

// A new backend (S3, gRPC REAPI, ...) is one tier file and one row here: its tier extends RemoteTierBase
// (remote_base.hpp: counters, stats, refusals, the lookup and manifest frames) and, to publish in the
// background, uses a PublishThread (publish_queue.hpp); its file gives a URL parser, a "supported in this
// build" test and a constructor, and RemoteKind gets its value.
constexpr std::array<RemoteBackend, 2> kBackends{{
    {"redis", RemoteKind::redis, {"redis://", ""}, "rediss://", "redis://[[user]:password@]host[:port][/db]",
     &parse_redis_url, &remote_supported, &open_redis_remote},
    {"http", RemoteKind::http, {"http://", "https://"}, "", "http(s)://[user@]host[:port][/path]", &parse_http_url,
     &http_remote_supported, &open_http_remote},
}};

/// "a, b or c": the items, the last after "or" (`separator` between the others).
template <class Each>
std::string listed(std::string_view separator, const Each& each) {
  std::vector<std::string_view> items;
  for (const RemoteBackend& backend : kBackends) each(backend, items);
  std::string text;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) text += i + 1 == items.size() ? " or " : separator;
    text += items[i];
  }
  return text;
}

/// "redis://, http:// or https://": every scheme the table takes.
std::string known_schemes() {
  return listed(", ", [](const RemoteBackend& backend, std::vector<std::string_view>& items) {
    for (std::string_view scheme : backend.schemes) {
      if (!scheme.empty()) items.push_back(scheme);
    }
  });
}

}  // namespace

std::span<const RemoteBackend> remote_backends() noexcept { return kBackends; }

}  // namespace detail

namespace {

/// The row that takes `url`'s scheme (or claims it to refuse it), or null.
const detail::RemoteBackend* backend_of(std::string_view url) noexcept {
  for (const detail::RemoteBackend& backend : detail::kBackends) {
    if (!backend.refuses.empty() && url.starts_with(backend.refuses)) return &backend;
    for (std::string_view scheme : backend.schemes) {
      if (!scheme.empty() && url.starts_with(scheme)) return &backend;
    }
  }
  return nullptr;
}

}  // namespace

std::string_view remote_backend_name(std::string_view url) noexcept {
  const detail::RemoteBackend* backend = backend_of(url);
  return backend != nullptr ? backend->name : std::string_view();
}

RemoteConfig parse_remote_url(std::string_view url) {
  if (const detail::RemoteBackend* backend = backend_of(url)) return backend->parse(url);
  const std::string forms = detail::listed(
      ", ", [](const detail::RemoteBackend& backend, std::vector<std::string_view>& items) { items.push_back(backend.form); });
  throw std::invalid_argument(fmt::format("invalid remote cache URL \"{}\": the scheme must be {} (expected {})",
                                          redact_remote_url(url), detail::known_schemes(), forms));
}

std::unique_ptr<RemoteTier> open_remote(const RemoteConfig& config) {
  if (config.host.empty()) throw std::invalid_argument("remote cache: no host configured");
  for (const detail::RemoteBackend& backend : detail::kBackends) {
    if (backend.kind == config.kind) return backend.open(config);
  }
  throw std::invalid_argument(fmt::format("remote cache {}: no backend for its kind ({} known: {})", config.display(),
                                          detail::kBackends.size(), detail::known_schemes()));
}

}  // namespace kiln::cache
