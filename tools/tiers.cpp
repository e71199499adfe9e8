#include "tiers.hpp"

#include <fmt/format.h>

#include "kiln/cache/pack.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/cache/storage.hpp"

namespace kiln::cli {
namespace {

/// The tiers the engine would open, in its order, opened to be inspected: a miss never takes a compile
/// lease (the CLI compiles nothing after one).
std::vector<cache::OpenedTier> open_for_inspection(const EngineConfig& config) {
  cache::StorageConfig storage = config.storage_config();
  storage.tier_leases = false;
  return cache::open_tiers(storage);
}

}  // namespace

std::vector<TierReport> describe_tiers(const EngineConfig& config) {
  std::vector<TierReport> reports;
  for (cache::OpenedTier& opened : open_for_inspection(config)) {
    TierReport report{std::string(cache::to_string(opened.kind)), {}, {}, opened.location, false, opened.error, {}};
    if (opened.kind == cache::TierKind::remote) report.backend = cache::remote_backend_name(opened.location);
    if (const auto* pack = dynamic_cast<const cache::PackReader*>(opened.tier.get())) {
      report.ok = true;
      report.detail = fmt::format("{} entries", pack->records().size());
    } else if (auto* remote = dynamic_cast<cache::RemoteTier*>(opened.tier.get())) {
      report.ok = remote->ping(&report.detail);  // "redis 7.0.15, PONG in 0.21 ms", "HTTP 404 in ..." or why not
      report.backend = remote->backend();
      report.lease = remote->fleet_lease() ? "compile lease" : "no lease";
      report.security = remote->config().authenticated()
                            ? fmt::format("authenticated: entries carry an HMAC-SHA-256 under the secret in {}",
                                          remote->config().secret_file)
                            : std::string("unauthenticated: set KILN_REMOTE_SECRET_FILE to refuse planted entries");
      if (remote->config().tls && !remote->config().verify_tls) {
        report.security += "; TLS certificate verification is off (KILN_REMOTE_HTTP_INSECURE=1)";
      }
    }
    reports.push_back(std::move(report));
  }
  return reports;
}

std::string remote_unusable(const EngineConfig& config) {
  for (const cache::OpenedTier& opened : open_for_inspection(config)) {
    if (opened.kind == cache::TierKind::remote && !opened.tier) {
      return fmt::format("the remote cache {} cannot be used: {}", opened.location, opened.error);
    }
  }
  return {};
}

std::vector<std::unique_ptr<cache::Tier>> open_tiers(const EngineConfig& config, std::vector<std::string>& errors) {
  std::vector<std::unique_ptr<cache::Tier>> tiers;
  for (cache::OpenedTier& opened : open_for_inspection(config)) {
    if (opened.tier) {
      tiers.push_back(std::move(opened.tier));
    } else {
      errors.push_back(std::move(opened.error));
    }
  }
  return tiers;
}

}  // namespace kiln::cli
