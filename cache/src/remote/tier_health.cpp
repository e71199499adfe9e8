// The tiers as the CLI inspects them (storage.hpp: inspect_tiers, tier_holding), reached through the
// engine's facade (EngineConfig::tiers, Engine::tier_holding): opened as the engine opens them, but
// without compile leases, since nothing is compiled after these lookups.
#include <fmt/format.h>

#include <chrono>

#include "kiln/cache/pack.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/cache/storage.hpp"

namespace kiln::cache {

namespace {

std::vector<OpenedTier> open_for_inspection(const StorageConfig& config) {
  StorageConfig inspected = config;
  inspected.tier_leases = false;
  return open_tiers(inspected);
}

}  // namespace

std::vector<TierHealth> inspect_tiers(const StorageConfig& config, bool ask_servers) {
  std::vector<TierHealth> tiers;
  for (OpenedTier& opened : open_for_inspection(config)) {
    TierHealth health;
    health.kind = opened.kind;
    health.location = opened.location;
    health.opened = opened.tier != nullptr;
    health.detail = opened.error;
    if (opened.kind == TierKind::remote) health.backend = remote_backend_name(opened.location);
    if (const auto* pack = dynamic_cast<const PackReader*>(opened.tier.get())) {
      health.ok = true;
      const std::size_t count = pack->records().size();
      health.detail = fmt::format("{} {}", count, count == 1 ? "entry" : "entries");
    } else if (auto* remote = dynamic_cast<RemoteTier*>(opened.tier.get())) {
      // "redis 7.0.15, PONG in 0.21 ms", "HTTP 404 in ...", or why not
      health.ok = !ask_servers || remote->ping(&health.detail);
      health.backend = remote->backend();
      health.fleet_lease = remote->fleet_lease();
      const RemoteConfig& remote_config = remote->config();
      health.security = remote_config.authenticated()
                            ? fmt::format("authenticated: entries carry an HMAC-SHA-256 under the secret in {}",
                                          remote_config.secret_file)
                            : std::string("unauthenticated: set KILN_REMOTE_SECRET_FILE to refuse planted entries");
      if (remote_config.tls && !remote_config.verify_tls) {
        health.security += "; TLS certificate verification is off (KILN_REMOTE_HTTP_INSECURE=1)";
      }
    }
    tiers.push_back(std::move(health));
  }
  return tiers;
}

std::string tier_holding(const StorageConfig& config, const Hash128& key, std::string_view canonical_key,
                         std::vector<std::string>& errors) {
  std::string holder;
  for (OpenedTier& opened : open_for_inspection(config)) {
    if (!opened.tier) {
      errors.push_back(std::move(opened.error));
      continue;
    }
    if (!holder.empty()) continue;  // asked in order until one has it; the rest only say why they cannot be
    if (opened.tier->get(key, canonical_key).outcome == LookupOutcome::hit) {
      holder = opened.tier->describe();
      continue;
    }
    // Nothing will be compiled for this miss: release a compile lease the tier may have taken.
    opened.tier->abandon(key);
  }
  return holder;
}

}  // namespace kiln::cache
