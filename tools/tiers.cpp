#include "tiers.hpp"

#include <fmt/format.h>

#include "kiln/cache/storage.hpp"

namespace kiln::cli {

std::vector<TierReport> describe_tiers(const EngineConfig& config) {
  std::vector<TierReport> reports;
  for (cache::TierHealth& tier : config.tiers(/*ask_servers=*/true)) {
    TierReport report{std::string(cache::to_string(tier.kind)), std::move(tier.backend), {}, std::move(tier.location),
                      tier.ok, std::move(tier.detail), std::move(tier.security)};
    if (tier.kind == cache::TierKind::remote && tier.opened) report.lease = tier.fleet_lease ? "compile lease" : "no lease";
    reports.push_back(std::move(report));
  }
  return reports;
}

std::string remote_unusable(const EngineConfig& config) {
  for (const cache::TierHealth& tier : config.tiers(/*ask_servers=*/false)) {
    if (tier.kind == cache::TierKind::remote && !tier.opened) {
      return fmt::format("the remote cache {} cannot be used: {}", tier.location, tier.detail);
    }
  }
  return {};
}

}  // namespace kiln::cli
