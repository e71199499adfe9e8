// Lifetime counters of each remote tier (remote.hpp: record_tier_stats / load_tier_stats): one small
// text file per tier under <root>/stats/, named by a hash of the tier's URL (without its password),
// added to under a file lock by every process that used the tier, like the cache's own shards.
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string>
#include <string_view>

#include "kiln/base/sha256.hpp"
#include "kiln/cache/remote.hpp"
#include "posix_util.hpp"

namespace kiln::cache {
namespace {

constexpr std::string_view kHeader = "kiln-tier-stats/1\n";
constexpr std::string_view kPrefix = "tier-";

// clang-format off
#define KILN_TIER_COUNTERS(X) \
  X(hits) X(misses) X(failures) X(skipped) X(rejected) X(unauthenticated) X(published) X(publish_dropped) \
  X(manifest_hits) X(manifest_misses) X(manifest_refused) X(manifests_published)
// clang-format on

/// The file's tier: "url <url>" and "name value" lines after the header; bad lines are skipped.
TierLifetime parse(std::string_view text) {
  TierLifetime tier;
  if (!text.starts_with(kHeader)) return tier;
  text.remove_prefix(kHeader.size());
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, space);
    const std::string_view value = line.substr(space + 1);
    if (name == "url") {
      tier.url = std::string(value);
      continue;
    }
    std::uint64_t number = 0;
    const auto [ptr, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (error != std::errc{} || ptr != value.data() + value.size()) continue;
#define KILN_PARSE_TIER_FIELD(field) \
  if (name == #field) tier.stats.field = number;
    KILN_TIER_COUNTERS(KILN_PARSE_TIER_FIELD)
#undef KILN_PARSE_TIER_FIELD
  }
  return tier;
}

std::string format(const TierLifetime& tier) {
  std::string text(kHeader);
  text += fmt::format("url {}\n", tier.url);
#define KILN_FORMAT_TIER_FIELD(field) text += fmt::format("{} {}\n", #field, tier.stats.field);
  KILN_TIER_COUNTERS(KILN_FORMAT_TIER_FIELD)
#undef KILN_FORMAT_TIER_FIELD
  return text;
}

}  // namespace

void record_tier_stats(const std::filesystem::path& root, const std::string& url, const RemoteStats& delta) noexcept {
  try {
    bool any = false;
#define KILN_ANY_TIER_FIELD(field) any = any || delta.field != 0;
    KILN_TIER_COUNTERS(KILN_ANY_TIER_FIELD)
#undef KILN_ANY_TIER_FIELD
    if (!any) return;
    const std::filesystem::path dir = root / "stats";
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return;
    const std::string name =
        fmt::format("{}{}", kPrefix, kiln::detail::to_hex(kiln::detail::sha256(url)).substr(0, 16));
    (void)detail::update_locked_text((dir / name).string(), [&](const std::string& text) {
      TierLifetime total = parse(text);
      total.url = url;
#define KILN_ADD_TIER_FIELD(field) total.stats.field += delta.field;
      KILN_TIER_COUNTERS(KILN_ADD_TIER_FIELD)
#undef KILN_ADD_TIER_FIELD
      return format(total);
    });
  } catch (...) {
    // A failed stats write is never an error.
  }
}

std::vector<TierLifetime> load_tier_stats(const std::filesystem::path& root) noexcept {
  std::vector<TierLifetime> tiers;
  try {
    std::error_code error;
    for (const auto& item : std::filesystem::directory_iterator(root / "stats", error)) {
      if (!item.path().filename().string().starts_with(kPrefix)) continue;
      const auto text = detail::read_locked_text(item.path().string());
      if (!text) continue;
      TierLifetime tier = parse(*text);
      if (!tier.url.empty()) tiers.push_back(std::move(tier));
    }
  } catch (...) {
    // What was read so far.
  }
  return tiers;
}

void zero_tier_stats(const std::filesystem::path& root) noexcept {
  try {
    std::error_code error;
    for (const auto& item : std::filesystem::directory_iterator(root / "stats", error)) {
      if (item.path().filename().string().starts_with(kPrefix)) std::filesystem::remove(item.path(), error);
    }
  } catch (...) {
  }
}

}  // namespace kiln::cache
