#pragma once
// The read-through tiers below the local store, as the CLI shows them: mounted packs (KILN_CACHE_PACKS),
// then the remote tiers (KILN_REMOTE_CACHE: a chain of redis:// and http(s):// URLs). The engine's facade
// opens and asks them (EngineConfig::tiers, cache::inspect_tiers), in the engine's order; this file only
// words what it found.
#include <string>
#include <vector>

#include "kiln/engine.hpp"

namespace kiln::cli {

/// One tier's state for `kiln devices` and `kiln cache stats`.
struct TierReport {
  std::string kind;      ///< "pack", "remote"
  std::string backend;   ///< the remote's backend: "redis", "http" (empty for a pack)
  /// The remote's part in fleet compile-once: "compile lease" (Redis) or "no lease" (HTTP: plain PUT
  /// cannot hold one); empty for a pack or a remote that could not be opened.
  std::string lease;
  std::string location;  ///< the pack's path, the remote's address
  bool ok = false;
  std::string detail;  ///< "1234 entries", or why it cannot be used
  /// The remote: whether its entries are authenticated ("authenticated: ..." / "unauthenticated: set
  /// KILN_REMOTE_SECRET_FILE ..."); empty for a pack or a tier that could not be opened.
  std::string security;
};

/// Every configured tier and whether it can be used (each remote server is asked). Never throws for a
/// broken tier (it is reported).
[[nodiscard]] std::vector<TierReport> describe_tiers(const EngineConfig& config);

/// Why a configured remote tier cannot be opened (an unusable secret file, a malformed address), or
/// empty when every one can (whether its server answers is not asked). For commands that need the remote.
[[nodiscard]] std::string remote_unusable(const EngineConfig& config);

}  // namespace kiln::cli
