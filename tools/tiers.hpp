#pragma once
// The read-through tiers below the local store, as the CLI sees them: mounted packs (KILN_CACHE_PACKS),
// then the remote tiers (KILN_REMOTE_CACHE: a chain of redis:// and http(s):// URLs). They are opened by the storage front end
// (cache::open_tiers, from EngineConfig::storage_config()), so the CLI sees them in the engine's order.
#include <memory>
#include <string>
#include <vector>

#include "kiln/cache/tier.hpp"
#include "kiln/engine.hpp"

namespace kiln::cli {

/// One tier's state for `kiln devices`.
struct TierReport {
  std::string kind;      ///< "pack", "remote"
  std::string backend;   ///< the remote's server kind: "redis", "http" (empty for a pack)
  /// The remote's part in fleet compile-once: "compile lease" (Redis) or "no lease" (HTTP: plain PUT
  /// cannot hold one); empty for a pack.
  std::string lease;
  std::string location;  ///< the pack's path, the remote's address
  bool ok = false;
  std::string detail;  ///< "1234 entries", or why it cannot be used
  /// The remote: whether its entries are authenticated ("authenticated: ..." / "unauthenticated: set
  /// KILN_REMOTE_SECRET_FILE ..."); empty for a pack or a tier that could not be opened.
  std::string security;
};

/// Every configured tier and whether it can be used. Never throws for a broken tier (it is reported).
[[nodiscard]] std::vector<TierReport> describe_tiers(const EngineConfig& config);

/// Why the configured remote tier cannot be opened (an unusable secret file, a malformed address), or
/// empty when it can (whether its server answers is not asked). For commands that need the remote.
[[nodiscard]] std::string remote_unusable(const EngineConfig& config);

/// Opens every configured tier that can be opened, in the engine's order; problems go to `errors`.
[[nodiscard]] std::vector<std::unique_ptr<cache::Tier>> open_tiers(const EngineConfig& config,
                                                                   std::vector<std::string>& errors);

}  // namespace kiln::cli
