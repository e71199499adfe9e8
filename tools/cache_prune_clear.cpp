// kiln cache prune (least recently used first, by size, age or target) and kiln cache clear.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cache_commands.hpp"
#include "cache_pch.hpp"
#include "cli.hpp"
#include "formatting.hpp"
#include "json_output.hpp"
#include "kiln/cache/blob.hpp"
#include "kiln/includes/dep_manifest.hpp"
#include "store_scan.hpp"

namespace kiln::cli {
namespace {

/// What prune keeps of one entry file (with --target, after reading its header).
struct EntrySummary {
  cache::EntryFile file;
  std::string target;  ///< with --target only
};

/// What the prune flags ask for, parsed.
struct PruneRule {
  // Plain values with flags rather than std::optional: GCC 12 misreports optionals here (-Wmaybe-uninitialized).
  bool by_size = false;
  bool by_age = false;
  std::uint64_t max_size = 0;
  std::chrono::seconds older_than{0};
};

/// What `prune` chose (and, unless a dry run, removed).
struct PruneReport {
  std::uint64_t before = 0;            ///< bytes in the cache before
  std::vector<EntrySummary> eligible;  ///< least recently used first
  std::size_t chosen = 0;              ///< the first `chosen` of `eligible` are to go
  std::vector<bool> gone;              ///< per chosen entry: removed (every one for a dry run)
};

std::uint64_t total_size(const std::vector<cache::EntryFile>& files) {
  std::uint64_t total = 0;
  for (const cache::EntryFile& file : files) total += file.size;
  return total;
}

// ---- gathering and removing ---------------------------------------------------------------------------

PruneRule parse_prune_rule(const PruneArgs& args) {
  if (args.max_size.empty() && args.older_than.empty() && args.target.empty() && !args.pch) {
    throw UsageError("prune needs --max-size SIZE, --older-than AGE, --target T or --pch");
  }
  if (args.pch && !(args.max_size.empty() && args.older_than.empty() && args.target.empty())) {
    throw UsageError("prune --pch removes every precompiled header: it takes no --max-size, --older-than or --target");
  }
  PruneRule rule;
  rule.by_size = !args.max_size.empty();
  rule.by_age = !args.older_than.empty();
  rule.max_size = rule.by_size ? parse_size_flag(args.max_size, "--max-size") : 0;
  rule.older_than = rule.by_age ? parse_age(args.older_than, "--older-than") : std::chrono::seconds(0);
  if (!args.target.empty()) {
    // Only the shape is checked: entries for a target this kiln cannot compile may still be pruned.
    const std::string& t = args.target;
    if (!(t.starts_with("sm_") || t.starts_with("compute_") || t.starts_with("lto_") || t.starts_with("gfx"))) {
      throw UsageError(
          fmt::format("--target {}: not a target id (expected sm_XX, compute_XX, lto_XX or gfxNNN...)", t));
    }
  }
  return rule;
}

/// Each entry's target from its header (with its size and last use from the same open file).
std::vector<EntrySummary> entries_for_target(const cache::Store& store, const std::string& target) {
  std::vector<std::vector<EntrySummary>> shards(cache::Store::kShardCount);
  scan_store(store, cache::ScanDepth::lane, true, [&](unsigned index, const cache::ScannedEntry& e) {
    const EntryState state = entry_state(e);
    if (state == EntryState::damaged || state == EntryState::unreadable) return;
    const std::string_view entry_target = cache::labeled_target(*e.header);  // a blob's: its `target` label
    if (!target_matches(entry_target, target)) return;
    shards[index].push_back(
        {cache::EntryFile{std::string(e.path), e.file_hash, e.size, e.mtime}, std::string(entry_target)});
  });
  std::vector<EntrySummary> out;
  for (auto& shard : shards) std::move(shard.begin(), shard.end(), std::back_inserter(out));
  return out;
}

/// Eligible entries, least recently used first (the order Store::trim evicts in), and how many of them go.
PruneReport choose_entries(const cache::Store& store, const PruneArgs& args, const PruneRule& rule) {
  PruneReport report;
  std::vector<cache::EntryFile> files = store.list();
  // Precompiled headers count in the cache's size and go least recently used first with entries, as the
  // engine's own trim takes them (a target names entries only; --pch names them alone).
  std::vector<cache::EntryFile> pch = pch_files(store);
  files.insert(files.end(), pch.begin(), pch.end());
  report.before = total_size(files);
  if (args.pch) {
    for (cache::EntryFile& file : pch) report.eligible.push_back({std::move(file), "pch"});
  } else if (!args.target.empty()) {
    report.eligible = entries_for_target(store, args.target);
  } else {
    report.eligible.resize(files.size());
    for (std::size_t i = 0; i < files.size(); ++i) report.eligible[i].file = files[i];
  }
  if (rule.by_age) {
    const auto cutoff = std::chrono::system_clock::now() - rule.older_than;
    std::erase_if(report.eligible, [&](const EntrySummary& e) { return e.file.used() >= cutoff; });
  }
  std::sort(report.eligible.begin(), report.eligible.end(), [](const EntrySummary& a, const EntrySummary& b) {
    return a.file.used() != b.file.used() ? a.file.used() < b.file.used() : key_order(a.file, b.file);
  });
  std::uint64_t remaining = report.before;
  for (const EntrySummary& e : report.eligible) {
    if (rule.by_size && remaining <= rule.max_size) break;
    ++report.chosen;
    remaining -= std::min(remaining, e.file.size);
  }
  report.gone.assign(report.chosen, true);
  return report;
}

/// An entry used since the listing (its mtime moved) is no longer among the least recently used: kept.
void remove_chosen(cache::Store& store, PruneReport& report) {
  std::vector<const cache::EntryFile*> targets;
  for (std::size_t i = 0; i < report.chosen; ++i) targets.push_back(&report.eligible[i].file);
  report.gone = remove_files(targets, true);
  (void)store.remeasure_size();  // the running size total, after removing files behind the store
}

/// What `clear` removed.
struct ClearReport {
  std::size_t files = 0;  ///< entry files listed
  std::size_t removed = 0;
  std::uint64_t freed = 0;
  std::size_t manifests_removed = 0;
  std::size_t pch_files = 0, pch_removed = 0;  ///< precompiled headers and their records
  std::uint64_t pch_freed = 0;
};

ClearReport clear_cache(cache::Store& store) {
  ClearReport report;
  const std::vector<cache::EntryFile> files = store.list();
  const std::vector<cache::EntryFile> pch = pch_files(store);
  std::vector<const cache::EntryFile*> targets;
  for (const cache::EntryFile& file : files) targets.push_back(&file);
  for (const cache::EntryFile& file : pch) targets.push_back(&file);
  std::vector<bool> gone = remove_files(targets, false);
  for (std::size_t i = files.size(); i < gone.size(); ++i) {
    if (!gone[i]) continue;
    ++report.pch_removed;
    report.pch_freed += pch[i - files.size()].size;
  }
  report.pch_files = pch.size();
  gone.resize(files.size());
  (void)store.remeasure_size();  // the running size total, after removing files behind the store
  report.files = files.size();
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (!gone[i]) continue;
    ++report.removed;
    report.freed += files[i].size;
  }
  // The dependency manifests name entries by key: without their entries they would only cost a lookup,
  // but "clear" means nothing of this cache is left.
  cache::DependencyManifests manifests(store.config().root, /*read_only=*/false);
  report.manifests_removed = manifests.mode() == cache::StoreMode::read_write ? manifests.clear() : 0;
  return report;
}

// ---- rendering ----------------------------------------------------------------------------------------

void render_prune(const PruneReport& report, const PruneArgs& args) {
  std::size_t removed = 0;
  std::uint64_t freed = 0;
  json list = json::array();
  std::string text;
  for (std::size_t i = 0; i < report.chosen; ++i) {
    if (!report.gone[i]) continue;
    const EntrySummary& e = report.eligible[i];
    ++removed;
    freed += e.file.size;
    if (args.dry_run) {
      text += fmt::format("would remove {} {:>10}  last used {} ago{}\n", e.file.file_hash.hex(),
                          format_bytes(e.file.size), format_age(e.file.used()), e.target.empty() ? "" : "  " + e.target);
      if (args.json) list.push_back({{"key", e.file.file_hash.hex()}, {"size", e.file.size}});
    }
  }
  if (args.json) {
    print_json({{"removed", removed},
                {"bytes_before", report.before},
                {"bytes_after", report.before - freed},
                {"dry_run", args.dry_run},
                {"entries", std::move(list)}});
    return;
  }
  text += fmt::format("prune: {} {} ({} freed); cache {} {}\n", args.dry_run ? "would remove" : "removed",
                      counted(removed, "entry", "entries"), format_bytes(freed), args.dry_run ? "would be" : "now",
                      format_bytes(report.before - freed));
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace

int run_prune(const PruneArgs& args) {
  const PruneRule rule = parse_prune_rule(args);
  const auto store = open_store();
  if (!args.dry_run) require_writable(*store, "cache prune");
  PruneReport report = choose_entries(*store, args, rule);
  if (!args.dry_run) remove_chosen(*store, report);
  render_prune(report, args);
  return kExitOk;
}

int run_clear() {
  const auto store = open_store();
  require_writable(*store, "cache clear");
  const ClearReport report = clear_cache(*store);
  std::cout << fmt::format(
      "clear: removed {} ({}){}{} from {}\n", counted(report.removed, "entry", "entries"), format_bytes(report.freed),
      report.manifests_removed == 0
          ? std::string()
          : " and " + counted(report.manifests_removed, "dependency manifest", "dependency manifests"),
      report.pch_removed == 0 ? std::string()
                              : fmt::format(" and {} ({})",
                                            counted(report.pch_removed, "precompiled header file",
                                                    "precompiled header files"),
                                            format_bytes(report.pch_freed)),
      store->config().root.string());
  return report.removed == report.files && report.pch_removed == report.pch_files ? kExitOk : kExitFound;
}

}  // namespace kiln::cli
