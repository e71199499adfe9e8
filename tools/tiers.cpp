#include "tiers.hpp"

#include <exception>

#include <fmt/format.h>

#include "kiln/cache/pack.hpp"

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
  // The remote tier (KILN_REMOTE_CACHE) reports here.
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
  // The remote tier (KILN_REMOTE_CACHE) opens here.
  return tiers;
}

}  // namespace kiln::cli
