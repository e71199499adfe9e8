// kiln cache export (entries into one pack file, .kpack) and kiln cache import (a pack's entries, each
// verified, into the cache).
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "cache_commands.hpp"
#include "cache_inspect.hpp"
#include "cli.hpp"
#include "formatting.hpp"
#include "kiln/cache/blob.hpp"
#include "kiln/cache/pack.hpp"
#include "store_scan.hpp"

namespace kiln::cli {
namespace {

/// What `export` wrote and skipped. A skipped entry is warned about when it is met (on stderr), as the
/// pack may take long to write.
struct ExportReport {
  std::size_t skipped = 0;                        ///< damaged entries
  std::size_t skipped_refused = 0;                ///< entries the engine refuses for their (or their shard's) mode
  std::map<std::string, std::size_t> per_target;  ///< --target -> entries it matched
  std::set<std::string> present;                  ///< every entry's target, to name them when a --target matched none
};

/// What `import` did with each record of the pack.
struct ImportReport {
  std::size_t records = 0;
  std::size_t imported = 0;
  std::size_t present = 0;
  std::size_t rejected = 0;
  std::size_t failed = 0;
};

// ---- export -------------------------------------------------------------------------------------------

/// Entry paths the engine refuses for their (or their shard's) mode.
std::set<std::string> refused_entry_paths(const cache::Store& store) {
  std::set<std::string> refused;
  std::mutex refused_mutex;
  scan_store(store, cache::ScanDepth::header, /*with_mtime=*/true, [&](unsigned, const cache::ScannedEntry& e) {
    if (e.refused.empty()) return;
    const std::lock_guard lock(refused_mutex);
    refused.insert(std::string(e.path));
  });
  return refused;
}

/// Adds every usable entry that the --target flags want (every one without them) to the pack; `refused`:
/// refused_entry_paths().
ExportReport add_entries(const cache::Store& store, const std::set<std::string>& refused,
                         const std::vector<std::string>& targets, cache::PackWriter& writer) {
  ExportReport report;
  for (const std::string& target : targets) report.per_target[target] = 0;
  for (const cache::EntryFile& file : store.list()) {
    if (refused.count(file.path.string()) != 0) {
      ++report.skipped_refused;
      std::cerr << fmt::format("kiln: warning: skipped refused entry {}: {}\n", file.file_hash.hex(),
                               entry_refusal(store, file.file_hash, file.path));
      continue;
    }
    auto parsed = store.read_file(file.path);
    auto* entry = std::get_if<cache::Entry>(&parsed);
    if (entry == nullptr || entry->key_hash != file.file_hash) {
      ++report.skipped;
      std::cerr << fmt::format("kiln: warning: skipped damaged entry {}: {}\n", file.file_hash.hex(),
                               entry ? "file name names another key" : std::get<cache::ContentError>(parsed).reason);
      continue;
    }
    // A blob's target is its `target` label (a Triton kernel's group, kiln/cache/blob.hpp), else none.
    std::string entry_target = entry->target;
    if (entry->payload_kind == PayloadKind::blob) {
      for (const cache::BlobLabel& label : cache::blob_labels(*entry)) {
        if (label.name == "target") entry_target = label.value;
      }
    }
    if (!entry_target.empty()) report.present.insert(entry_target);
    bool wanted = targets.empty();
    for (auto& [target, matched] : report.per_target) {
      if (target_matches(entry_target, target)) {
        ++matched;
        wanted = true;
      }
    }
    if (wanted) writer.add(*entry);
  }
  return report;
}

/// A --target that matched nothing is a mistake (a typo, or a target never compiled here): write no
/// pack, rather than one that silently lacks what was asked for.
void require_every_target_matched(const ExportReport& report) {
  std::vector<std::string> unmatched;
  for (const auto& [target, matched] : report.per_target) {
    if (matched == 0) unmatched.push_back(target);
  }
  if (unmatched.empty()) return;
  throw UsageError(fmt::format("cache export: no entry for target {} (targets in the cache: {}); nothing written",
                               fmt::join(unmatched, ", "),
                               report.present.empty() ? "none" : fmt::format("{}", fmt::join(report.present, ", "))));
}

// ---- import -------------------------------------------------------------------------------------------

/// Adds each record of the pack that verifies and is not already here; a rejected one is warned about
/// when it is met.
ImportReport import_records(const cache::PackReader& pack, cache::Store& store) {
  ImportReport report;
  report.records = pack.records().size();
  for (const cache::PackRecord& record : pack.records()) {
    auto parsed = pack.read(record);
    if (auto* error = std::get_if<cache::ContentError>(&parsed)) {
      ++report.rejected;
      std::cerr << fmt::format("kiln: warning: rejected {}: {}\n", record.key.hex(), error->reason);
      continue;
    }
    const cache::Entry& entry = std::get<cache::Entry>(parsed);
    auto existing = store.read_entry(entry.key_hash);
    if (const auto* old = std::get_if<cache::Entry>(&existing); old && old->canonical_key == entry.canonical_key) {
      ++report.present;
      continue;
    }
    if (store.put(entry)) {
      ++report.imported;
    } else {
      ++report.failed;
    }
  }
  return report;
}

}  // namespace

int run_export(const ExportArgs& args) {
  const auto store = open_store();
  // A pack is trusted wherever it is mounted: what the engine refuses here must not leave in one.
  if (store->refused()) {
    throw std::runtime_error(fmt::format("cache export: the cache at {} is {}; nothing exported",
                                         store->config().root.string(), store->mode_reason()));
  }
  const std::set<std::string> refused = refused_entry_paths(*store);
  cache::PackWriter writer(args.file);  // removes its temp file unless committed
  const ExportReport report = add_entries(*store, refused, args.targets, writer);
  require_every_target_matched(report);
  const std::size_t count = writer.size();
  const std::uint64_t bytes = writer.data_bytes();
  writer.commit();
  std::cout << fmt::format(
      "export: {} ({}) to {}{}{}\n", counted(count, "entry", "entries"), format_bytes(bytes), args.file,
      report.skipped > 0 ? fmt::format("; skipped {} damaged", report.skipped) : std::string(),
      report.skipped_refused > 0 ? fmt::format("; skipped {} refused", report.skipped_refused) : std::string());
  // A damaged or refused entry is something found.
  return report.skipped + report.skipped_refused == 0 ? kExitOk : kExitFound;
}

int run_import(const ImportArgs& args) {
  const auto pack = cache::PackReader::open(args.file);
  const auto store = open_store();
  require_writable(*store, "cache import");
  const ImportReport report = import_records(*pack, *store);
  std::cout << fmt::format("import: {} from {}: {} imported, {} already present, {} rejected, {} failed\n",
                           counted(report.records, "entry", "entries"), args.file, report.imported, report.present,
                           report.rejected, report.failed);
  return report.rejected + report.failed == 0 ? kExitOk : kExitFound;
}

}  // namespace kiln::cli
