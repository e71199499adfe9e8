#pragma once
// Private to cache/: the two remote backends' constructors, which open_remote() (remote_tier.cpp)
// picks between by RemoteConfig::kind.
#include <memory>

#include "kiln/cache/remote.hpp"

namespace kiln::cache::detail {

/// The Redis tier (remote_tier.cpp); throws std::runtime_error in a build without hiredis.
[[nodiscard]] std::unique_ptr<RemoteTier> open_redis_remote(const RemoteConfig& config);
/// The HTTP tier (remote_http.cpp); throws std::runtime_error in a build without libcurl's headers.
[[nodiscard]] std::unique_ptr<RemoteTier> open_http_remote(const RemoteConfig& config);

}  // namespace kiln::cache::detail
