#include "tiers.hpp"

#include <chrono>
#include <exception>

#include <fmt/format.h>

#include "kiln/cache/pack.hpp"
#include "kiln/cache/remote.hpp"

namespace kiln::cli {

std::vector<TierReport> describe_tiers(const EngineConfig& config) {
  std::vector<TierReport> reports;
  for (const std::string& pack : config.packs) {
    TierReport report{"pack", pack, false, {}};
    try {
      const auto reader = cache::PackReader::open(pack);
      report.ok = true;
      report.detail = fmt::format("{} entries", reader->records().size());
    } catch (const std::exception& error) {
      report.detail = error.what();
    }
    reports.push_back(std::move(report));
  }
  if (!config.remote.empty()) {
    TierReport report{"remote", cache::redact_remote_url(config.remote), false, {}};
    try {
      const auto remote = cache::open_remote(cache::remote_config_from_environment(config.remote));
      report.location = remote->config().display();  // never the password
      report.ok = remote->ping(&report.detail);      // "redis 7.0.15, PONG in 0.21 ms" or why not
    } catch (const std::exception& error) {
      report.detail = error.what();
    }
    reports.push_back(std::move(report));
  }
  return reports;
}

std::vector<std::unique_ptr<cache::Tier>> open_tiers(const EngineConfig& config, std::vector<std::string>& errors) {
  std::vector<std::unique_ptr<cache::Tier>> tiers;
  for (const std::string& pack : config.packs) {
    try {
      tiers.push_back(cache::open_pack(pack));
    } catch (const std::exception& error) {
      errors.emplace_back(error.what());
    }
  }
  if (!config.remote.empty()) {
    try {
      cache::RemoteConfig remote = cache::remote_config_from_environment(config.remote);
      remote.lease_wait = std::chrono::milliseconds(0);  // inspecting: never take a compile lease
      tiers.push_back(cache::open_remote(remote));
    } catch (const std::exception& error) {
      errors.emplace_back(error.what());
    }
  }
  return tiers;
}

}  // namespace kiln::cli
