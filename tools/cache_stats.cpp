// kiln cache stats: entries and bytes per lane and target (from headers), what is not usable, the
// dependency manifests, the lifetime counters every process adds to, and the configured read-through
// tiers (packs, the chain of remotes) with their health.
#include <algorithm>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cache_commands.hpp"
#include "cache_pch.hpp"
#include "cli.hpp"
#include "formatting.hpp"
#include "json_output.hpp"
#include "kiln/cache/blob.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/cache/stats.hpp"
#include "kiln/engine.hpp"
#include "kiln/includes/dep_manifest.hpp"
#include "store_scan.hpp"
#include "tiers.hpp"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

struct Group {
  Vendor vendor = Vendor::none;
  bool blob = false;       ///< entries under a caller's key (blob.hpp): one group per namespace and target label
  std::string name_space;  ///< a blob group's namespace
  std::string target;      ///< the entries' target (a blob's: its `target` label, often none)
  std::size_t entries = 0;
  std::uint64_t bytes = 0;
};

/// A group's place in the report: (lane or "blob", namespace, target).
using GroupKey = std::tuple<std::string, std::string, std::string>;

/// What the entries of the store add up to (one per shard directory while scanning, then summed).
struct Tally {
  std::size_t entries = 0;
  std::size_t damaged = 0;
  std::size_t unreadable = 0;
  std::size_t refused = 0;
  std::size_t not_entries = 0;  // links, FIFOs, ... at entry paths and stray names
  std::uint64_t bytes = 0;
  std::vector<Group> groups;  // few: one per lane and target
};

/// What `stats` found.
struct StatsReport {
  Tally tally;                       // its groups are empty: see `groups`
  std::map<GroupKey, Group> groups;  // (lane or "blob", namespace, target) -> entries and bytes
  std::size_t manifest_count = 0;
  std::size_t manifest_damaged = 0;
  std::uint64_t manifest_bytes = 0;
  cache::Counters lifetime;
};

// ---- gathering ----------------------------------------------------------------------------------------

void count_entry(Tally& tally, const cache::ScannedEntry& e) {
  ++tally.entries;
  tally.bytes += e.size;
  const EntryState state = entry_state(e);
  if (state == EntryState::damaged || state == EntryState::unreadable) {
    ++(state == EntryState::damaged ? tally.damaged : tally.unreadable);
    return;
  }
  if (state == EntryState::refused) ++tally.refused;
  const bool blob = e.header->payload_kind == PayloadKind::blob;
  // A blob's header is read whole even at lane depth (entry.hpp): its namespace and labels are here.
  const std::string name_space = blob ? cache::blob_namespace(e.header->canonical_key).value_or("?") : std::string();
  const std::string_view target = cache::labeled_target(*e.header);
  auto group = std::find_if(tally.groups.begin(), tally.groups.end(), [&](const Group& g) {
    return g.vendor == e.header->vendor && g.blob == blob && g.target == target && g.name_space == name_space;
  });
  if (group == tally.groups.end()) {
    tally.groups.push_back({e.header->vendor, blob, name_space, std::string(target), 0, 0});
    group = std::prev(tally.groups.end());
  }
  ++group->entries;
  group->bytes += e.size;
}

/// The fixed header and target of each entry (no payload, no checksum: `kiln cache verify` checks
/// those); sizes from the read where it reached the end of the file.
void gather_entries(const cache::Store& store, StatsReport& report) {
  std::vector<Tally> tallies(cache::Store::kShardCount);
  scan_store(
      store, cache::ScanDepth::lane, false,
      [&](unsigned index, const cache::ScannedEntry& e) { count_entry(tallies[index], e); },
      [&](unsigned index, const cache::StrayFile&) { ++tallies[index].not_entries; });
  Tally& sum = report.tally;
  for (const Tally& tally : tallies) {
    sum.entries += tally.entries;
    sum.damaged += tally.damaged;
    sum.unreadable += tally.unreadable;
    sum.refused += tally.refused;
    sum.not_entries += tally.not_entries;
    sum.bytes += tally.bytes;
    for (const Group& g : tally.groups) {
      Group& group = report.groups[{g.blob ? "blob" : std::string(to_string(g.vendor)), g.name_space, g.target}];
      group.vendor = g.vendor;
      group.blob = g.blob;
      group.name_space = g.name_space;
      group.target = g.target;
      group.entries += g.entries;
      group.bytes += g.bytes;
    }
  }
}

StatsReport gather_stats(const cache::Store& store, const cache::PersistentStats& persistent) {
  StatsReport report;
  gather_entries(store, report);
  // Dependency manifests (requests with include folders): how many, and how many are damaged.
  const cache::DependencyManifests manifests(store.refused() ? fs::path() : store.config().root, /*read_only=*/true);
  for (const cache::ScannedManifest& m : manifests.scan()) {
    ++report.manifest_count;
    report.manifest_bytes += m.size;
    if (!m.error.empty()) ++report.manifest_damaged;
  }
  report.lifetime = persistent.load_total();
  return report;
}

// ---- rendering ----------------------------------------------------------------------------------------

json lifetime_json(const cache::Counters& total) {
  json out = {{"hit_ratio", total.hit_ratio()}, {"compile_seconds", total.compile_seconds()}};
  // Every counter under its own name; the compile time as seconds (above), not nanoseconds.
#define KILN_COUNTER_JSON(field) \
  if (std::string_view(#field) != "compile_nanoseconds") out[#field] = total.field;
  KILN_CACHE_COUNTERS(KILN_COUNTER_JSON)
#undef KILN_COUNTER_JSON
  return out;
}

json stats_json(const cache::Store& store, const StatsReport& report) {
  json by_target = json::array();
  for (const auto& [key, group] : report.groups) {
    json item = {{"vendor", std::string(to_string(group.vendor))},
                 {"target", group.target},
                 {"entries", group.entries},
                 {"bytes", group.bytes}};
    if (group.blob) {  // entries under a caller's key: no lane; a target only where a label gives one
      item["kind"] = "blob";
      item["namespace"] = group.name_space;
    }
    by_target.push_back(std::move(item));
  }
  const Tally& t = report.tally;
  return {{"root", store.config().root.string()},
          {"mode", std::string(cache::to_string(store.mode()))},
          {"entries", t.entries},
          {"bytes", t.bytes},
          {"max_size", store.config().max_size},
          {"damaged", t.damaged},
          {"unreadable", t.unreadable},
          {"refused", t.refused},
          {"not_entries", t.not_entries},
          {"refused_root", store.refused() ? store.mode_reason() : std::string()},
          {"manifests",
           {{"count", report.manifest_count}, {"bytes", report.manifest_bytes}, {"damaged", report.manifest_damaged}}},
          {"by_target", std::move(by_target)},
          {"lifetime", lifetime_json(report.lifetime)}};
}

/// The cache's lines: root, entries per lane and target, what is not usable, the dependency manifests.
std::string contents_text(const cache::Store& store, const StatsReport& report) {
  const Tally& t = report.tally;
  std::string text;
  text += fmt::format("cache             {} ({})\n", store.config().root.string(), cache::to_string(store.mode()));
  text += fmt::format("entries           {} ({} of a {} limit)\n", t.entries, format_bytes(t.bytes),
                      format_bytes(store.config().max_size));
  for (const auto& [key, group] : report.groups) {
    const std::string what = group.blob ? fmt::format("{} {}", group.name_space, group.target) : group.target;
    text += fmt::format("  {:<4} {:<24} {:>7} entries  {:>10}\n", std::get<0>(key), what, group.entries,
                        format_bytes(group.bytes));
  }
  if (store.refused()) text += fmt::format("refused           the engine uses none of it: {}\n", store.mode_reason());
  if (t.damaged > 0) text += fmt::format("damaged           {} (kiln cache verify --fix removes them)\n", t.damaged);
  if (t.unreadable > 0)
    text +=
        fmt::format("unreadable        {} (cannot be opened or read; kiln cache verify lists them)\n", t.unreadable);
  if (t.refused > 0)
    text += fmt::format("refused           {} (in a shard directory others may write; kiln cache verify lists them)\n",
                        t.refused);
  if (t.not_entries > 0) {
    text += fmt::format("not entries       {} (links, FIFOs, stray files; kiln cache verify --fix removes them)\n",
                        t.not_entries);
  }
  if (report.manifest_count > 0) {
    text += fmt::format("manifests         {} ({}) for requests with include folders{}\n", report.manifest_count,
                        format_bytes(report.manifest_bytes),
                        report.manifest_damaged == 0
                            ? std::string()
                            : fmt::format(", {} damaged (the engine replaces them)", report.manifest_damaged));
  }
  return text;
}

std::string lifetime_text(const cache::Counters& total) {
  const std::uint64_t hits = total.memory_hits + total.disk_hits + total.remote_hits;
  std::string text = "lifetime (every process, since the counters were last zeroed):\n";
  text +=
      fmt::format("  hit ratio       {:.1f}% ({}, {})\n", 100.0 * total.hit_ratio(), counted(hits, "hit", "hits"),
                  counted(total.misses, "miss", "misses"));
  text += fmt::format("  hits            memory {}, disk {}, remote {}\n", total.memory_hits, total.disk_hits,
                      total.remote_hits);
  text += fmt::format("  compiles        {} ({} failed), {} compiling\n", total.compiles, total.compile_failures,
                      format_seconds(total.compile_seconds()));
  text += fmt::format("  corrupt removed {}\n", total.corrupt_removed);
  text += fmt::format("  evictions       {}\n", total.evictions);
  text += fmt::format("  written / read  {} / {}\n", format_bytes(total.bytes_written), format_bytes(total.bytes_read));
  if (total.manifest_hits + total.include_resolves > 0) {
    text += fmt::format("  include trees   {} settled by stat, {} resolved (headers read)\n", total.manifest_hits,
                        total.include_resolves);
  }
  if (total.remote_misses + total.remote_errors > 0) {
    text += fmt::format("  remote          {}, {}\n", counted(total.remote_misses, "miss", "misses"),
                        counted(total.remote_errors, "error", "errors"));
  }
  if (total.remote_unauthenticated > 0) {
    text += fmt::format("  unauthenticated {} remote entries refused for a missing or wrong MAC (deleted)\n",
                        total.remote_unauthenticated);
  }
  return text;
}

/// The lifetime counters recorded for `url`, if any.
const cache::TierLifetime* lifetime_of(const std::vector<cache::TierLifetime>& recorded, const std::string& url) {
  for (const cache::TierLifetime& tier : recorded) {
    if (tier.url == url) return &tier;
  }
  return nullptr;
}

std::string tier_counters_text(const cache::RemoteStats& s) {
  return fmt::format(
      "{} hits, {} misses, {} published ({} not), {} refused ({} for the MAC), {} failures, {} skipped; "
      "dependency manifests: {} hits, {} misses, {} refused, {} published",
      s.hits, s.misses, s.published, s.publish_dropped, s.rejected, s.unauthenticated, s.failures, s.skipped,
      s.manifest_hits, s.manifest_misses, s.manifest_refused, s.manifests_published);
}

/// The configured tiers, two lines each: "  remote http  https://c/k  ok: HTTP 404 in 0.4 ms ...", then
/// the tier's lifetime counters; then tiers with counters that are no longer configured.
std::string tiers_text(const std::vector<TierReport>& tiers, const std::vector<cache::TierLifetime>& recorded) {
  if (tiers.empty() && recorded.empty()) return {};
  std::string text =
      "tiers (asked in this order after the local cache; a later remote's hit back-fills the earlier):\n";
  for (const TierReport& tier : tiers) {
    text += fmt::format("  {:<6} {:<5} {}  {}{}\n", tier.kind, tier.backend, tier.location,
                        tier.ok ? "ok: " + tier.detail : "unusable: " + tier.detail,
                        tier.lease.empty() ? "" : fmt::format(" ({})", tier.lease));
    if (tier.kind == "remote") {
      const cache::TierLifetime* lifetime = lifetime_of(recorded, tier.location);
      text += fmt::format("    lifetime      {}\n", lifetime != nullptr ? tier_counters_text(lifetime->stats)
                                                                        : std::string("nothing recorded yet"));
    }
  }
  for (const cache::TierLifetime& lifetime : recorded) {
    const bool configured =
        std::any_of(tiers.begin(), tiers.end(), [&](const TierReport& tier) { return tier.location == lifetime.url; });
    if (!configured) {
      text += fmt::format("  remote (not configured now) {}\n    lifetime      {}\n", lifetime.url,
                          tier_counters_text(lifetime.stats));
    }
  }
  return text;
}

json tier_counters_json(const cache::RemoteStats& s) {
  return {{"hits", s.hits},
          {"misses", s.misses},
          {"published", s.published},
          {"publish_dropped", s.publish_dropped},
          {"rejected", s.rejected},
          {"unauthenticated", s.unauthenticated},
          {"failures", s.failures},
          {"skipped", s.skipped},
          {"manifest_hits", s.manifest_hits},
          {"manifest_misses", s.manifest_misses},
          {"manifest_refused", s.manifest_refused},
          {"manifests_published", s.manifests_published}};
}

json tiers_json(const std::vector<TierReport>& tiers, const std::vector<cache::TierLifetime>& recorded) {
  json array = json::array();
  for (const TierReport& tier : tiers) {
    array.push_back({{"kind", tier.kind},
                     {"backend", tier.backend},
                     {"location", tier.location},
                     {"ok", tier.ok},
                     {"detail", tier.detail},
                     {"lease", tier.lease}});
    if (const cache::TierLifetime* lifetime = lifetime_of(recorded, tier.location)) {
      array.back()["lifetime"] = tier_counters_json(lifetime->stats);
    }
  }
  for (const cache::TierLifetime& lifetime : recorded) {
    const bool configured =
        std::any_of(tiers.begin(), tiers.end(), [&](const TierReport& tier) { return tier.location == lifetime.url; });
    if (!configured) {
      array.push_back({{"kind", "remote"},
                       {"location", lifetime.url},
                       {"configured", false},
                       {"lifetime", tier_counters_json(lifetime.stats)}});
    }
  }
  return array;
}

}  // namespace

int run_stats(const StatsArgs& args) {
  const auto store = open_store();
  cache::PersistentStats persistent(store->config().root);
  if (args.zero) {
    require_writable(*store, "cache stats --zero");
    persistent.zero();
    cache::zero_tier_stats(store->config().root);
    std::cout << "lifetime counters zeroed\n";
    return kExitOk;
  }
  const StatsReport report = gather_stats(*store, persistent);
  const PchSummary pch = summarize_pch(*store);
  const std::vector<TierReport> tiers = describe_tiers(EngineConfig::from_environment());
  const std::vector<cache::TierLifetime> recorded = cache::load_tier_stats(store->config().root);
  if (args.json) {
    json document = stats_json(*store, report);
    document["pch"] = pch_json(*store, pch);
    document["tiers"] = tiers_json(tiers, recorded);
    print_json(document);
  } else {
    std::cout << contents_text(*store, report) + pch_text(*store, pch) + lifetime_text(report.lifetime) +
                     tiers_text(tiers, recorded);
  }
  // Exit 1 when something is wrong (docs/cli.md: a bad entry is "found"), 0 for a clean cache.
  const Tally& t = report.tally;
  return t.damaged + t.unreadable + t.refused + t.not_entries + pch.damaged != 0 || store->refused() ? kExitFound
                                                                                                      : kExitOk;
}

}  // namespace kiln::cli
