// kiln cache verify [--fix]: every entry checked whole, as Store::get checks it (checksum and stored
// key), and every dependency manifest as a lookup would parse it; --fix removes what is proven bad.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "cache_commands.hpp"
#include "cache_pch.hpp"
#include "cli.hpp"
#include "formatting.hpp"
#include "json_output.hpp"
#include "kiln/includes/dep_manifest.hpp"
#include "store_scan.hpp"

namespace kiln::cli {
namespace {

enum class Kind : std::uint8_t { damaged, unreadable, refused, not_entry };
constexpr const char* kLabel[] = {"bad", "unreadable", "refused", "not an entry"};
constexpr const char* kState[] = {"damaged", "unreadable", "refused", "not_entry"};

/// An entry file that is not ok, or something in the entry directories that is no entry.
struct Finding {
  Kind kind = Kind::damaged;
  std::optional<cache::Hash128> key;  // none for a stray name
  std::string path;
  std::string error;
  bool directory = false;
  bool removed = false;  ///< --fix removed it
  // (`{}`: initialized, so the designated initializers below may leave it out under -Wextra.)
  std::string remove_error{};  ///< --fix could not remove it: why
};

/// A dependency manifest that did not parse.
struct ManifestFinding {
  std::string request;  ///< the request key (hex); empty for a file in place of a folder
  std::string path;
  std::string error;
  bool io = false;  ///< a read error: the manifest may be fine
  bool removed = false;
  std::string remove_error{};
};

/// What `verify` found (and, with --fix, removed).
struct VerifyReport {
  std::size_t entries = 0;
  std::vector<Finding> findings;  // by shard directory, then path
  std::size_t manifests = 0;
  std::vector<ManifestFinding> manifest_findings;
};

/// Counts of what `verify` found, as both renderings print them.
struct VerifyCounts {
  std::size_t count[4] = {0, 0, 0, 0};  // by Kind
  std::size_t removed = 0;
  std::size_t left = 0;  // findings still there after this run
  std::size_t manifests_bad = 0;
  std::size_t manifests_unreadable = 0;
  std::size_t manifests_removed = 0;
  [[nodiscard]] std::size_t of(Kind kind) const { return count[static_cast<int>(kind)]; }
};

// ---- gathering and fixing -----------------------------------------------------------------------------

/// Whole entries, verified as Store::get verifies them (checksum and stored key), on io threads.
void gather_entry_findings(const cache::Store& store, VerifyReport& report) {
  struct ShardTally {
    std::size_t entries = 0;
    std::vector<Finding> findings;
  };
  std::vector<ShardTally> tallies(cache::Store::kShardCount);
  scan_store(
      store, cache::ScanDepth::entry, false,
      [&](unsigned index, const cache::ScannedEntry& e) {
        ShardTally& tally = tallies[index];
        ++tally.entries;
        const EntryState state = entry_state(e);
        if (state == EntryState::ok) return;
        const Kind kind = state == EntryState::damaged      ? Kind::damaged
                          : state == EntryState::unreadable ? Kind::unreadable
                                                            : Kind::refused;
        tally.findings.push_back(
            {.kind = kind, .key = e.file_hash, .path = std::string(e.path), .error = entry_problem(e)});
      },
      [&](unsigned index, const cache::StrayFile& stray) {
        tallies[index].findings.push_back({.kind = Kind::not_entry,
                                           .key = stray.file_hash,
                                           .path = std::string(stray.path),
                                           .error = stray.file_hash
                                                        ? stray_problem(stray)
                                                        : fmt::format("a {} that is not a cache entry", stray.kind),
                                           .directory = stray.is_directory()});
      });
  for (ShardTally& tally : tallies) {
    report.entries += tally.entries;
    std::sort(tally.findings.begin(), tally.findings.end(),
              [](const Finding& a, const Finding& b) { return a.path < b.path; });
    std::move(tally.findings.begin(), tally.findings.end(), std::back_inserter(report.findings));
  }
}

/// Only what is proven bad by its bytes, or is no entry at all, is removed. An entry that could not be
/// read may be fine (a transient error, a permission), and a refused one is the owner's to fix.
bool removable(const Finding& f) { return f.kind == Kind::damaged || (f.kind == Kind::not_entry && !f.directory); }

/// Removes `path`; true when it is gone (or was already), else `why` says why not.
bool remove_path(const std::string& path, std::string& why) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return true;
  why = std::error_code(errno, std::system_category()).message();
  return false;
}

void fix_entries(cache::Store& store, VerifyReport& report) {
  bool any = false;
  for (Finding& f : report.findings) {
    if (!removable(f)) continue;
    f.removed = remove_path(f.path, f.remove_error);
    any = any || f.removed;
  }
  if (any) (void)store.remeasure_size();  // the running size total, after removing files
}

/// Dependency manifests (requests with include folders): each parsed and checked as a lookup would. A
/// damaged one only costs a resolve (the engine replaces it); --fix removes it.
void gather_manifest_findings(const cache::Store& store, VerifyReport& report) {
  if (store.refused()) return;
  const cache::DependencyManifests manifests(store.config().root, /*read_only=*/true);
  for (const cache::ScannedManifest& m : manifests.scan()) {
    ++report.manifests;
    if (m.error.empty()) continue;
    const bool io =
        m.error.starts_with("cannot open") || m.error.starts_with("cannot stat") || m.error.starts_with("I/O error");
    report.manifest_findings.push_back({.request = m.in_place_of_folder ? std::string() : m.request_key.hex(),
                                        .path = m.path.string(),
                                        .error = m.error,
                                        .io = io});
  }
}

void fix_manifests(VerifyReport& report) {
  for (ManifestFinding& m : report.manifest_findings) {
    if (!m.io) m.removed = remove_path(m.path, m.remove_error);
  }
}

// ---- rendering ----------------------------------------------------------------------------------------

VerifyCounts count_findings(const VerifyReport& report) {
  VerifyCounts c;
  for (const Finding& f : report.findings) {
    ++c.count[static_cast<int>(f.kind)];
    if (f.removed) ++c.removed;
    if (!f.removed) ++c.left;
  }
  for (const ManifestFinding& m : report.manifest_findings) {
    ++(m.io ? c.manifests_unreadable : c.manifests_bad);
    if (m.removed) ++c.manifests_removed;
    if (!m.removed) ++c.left;
  }
  return c;
}

/// What a finding's line adds after its error: what --fix did about it.
std::string fix_note(const Finding& f, bool fix) {
  if (f.removed) return " (removed)";
  if (!fix) return {};
  if (removable(f)) return fmt::format(" (cannot remove: {})", f.remove_error);
  return f.kind == Kind::unreadable ? " (not removed: a read error does not prove the entry bad)"
         : f.kind == Kind::refused  ? " (not removed: make it mode 0600 in a 0700 directory, or remove it)"
                                    : " (not removed: a directory)";
}

std::string fix_note(const ManifestFinding& m, bool fix) {
  if (m.removed) return " (removed)";
  if (!fix) return {};
  if (m.io) return " (not removed: a read error does not prove the manifest bad)";
  return fmt::format(" (cannot remove: {})", m.remove_error);
}

json verify_json(const cache::Store& store, const VerifyReport& report, const VerifyCounts& c) {
  json bad_entries = json::array();
  for (const Finding& f : report.findings) {
    bad_entries.push_back({{"key", f.key ? f.key->hex() : std::string()},
                           {"path", f.path},
                           {"error", f.error},
                           {"state", kState[static_cast<int>(f.kind)]},
                           {"removed", f.removed}});
  }
  json bad_manifests = json::array();
  for (const ManifestFinding& m : report.manifest_findings) {
    bad_manifests.push_back({{"request", m.request},
                             {"path", m.path},
                             {"error", m.error},
                             {"state", m.io ? "unreadable" : "damaged"},
                             {"removed", m.removed}});
  }
  const std::size_t bad = c.of(Kind::damaged), unreadable = c.of(Kind::unreadable), refused = c.of(Kind::refused);
  return {{"entries", report.entries},
          {"ok", report.entries - bad - unreadable - refused},
          {"bad", bad},
          {"unreadable", unreadable},
          {"refused", refused},
          {"not_entries", c.of(Kind::not_entry)},
          {"removed", c.removed},
          {"refused_root", store.refused() ? store.mode_reason() : std::string()},
          {"bad_entries", std::move(bad_entries)},
          {"manifests",
           {{"count", report.manifests},
            {"ok", report.manifests - c.manifests_bad - c.manifests_unreadable},
            {"bad", c.manifests_bad},
            {"unreadable", c.manifests_unreadable},
            {"removed", c.manifests_removed}}},
          {"bad_manifests", std::move(bad_manifests)}};
}

/// One line per finding, entries first, then manifests.
std::string findings_text(const VerifyReport& report, bool fix) {
  std::string text;
  for (const Finding& f : report.findings) {
    const std::string key = f.key ? f.key->hex() : std::string();
    text += fmt::format("{}: {}{}{}: {}{}\n", kLabel[static_cast<int>(f.kind)], key, key.empty() ? "" : " ", f.path,
                        one_line(f.error), fix_note(f, fix));
  }
  for (const ManifestFinding& m : report.manifest_findings) {
    text += fmt::format("{} manifest: {}{}{}: {}{}\n", m.io ? "unreadable" : "bad", m.request,
                        m.request.empty() ? "" : " ", m.path, one_line(m.error), fix_note(m, fix));
  }
  return text;
}

/// The summary line (and a second one when the engine uses none of the cache).
std::string summary_text(const cache::Store& store, const VerifyReport& report, const VerifyCounts& c, bool fix) {
  const std::size_t entries = report.entries, manifests = report.manifests;
  const std::size_t bad = c.of(Kind::damaged), unreadable = c.of(Kind::unreadable), refused = c.of(Kind::refused);
  const std::size_t not_entries = c.of(Kind::not_entry);
  std::string text = fmt::format("verify: {}: {} ok, {} bad", counted(entries, "entry", "entries"),
                                 entries - bad - unreadable - refused, bad);
  if (unreadable != 0) text += fmt::format(", {} unreadable", unreadable);
  if (refused != 0) text += fmt::format(", {} refused", refused);
  if (not_entries != 0) {
    text += "; " + counted(not_entries, "file that is not an entry", "files that are not entries");
  }
  if (fix) text += fmt::format("; {} removed", c.removed);
  if (manifests != 0) {
    text += fmt::format("; {}: {} ok, {} bad", counted(manifests, "dependency manifest", "dependency manifests"),
                        manifests - c.manifests_bad - c.manifests_unreadable, c.manifests_bad);
    if (c.manifests_unreadable != 0) text += fmt::format(", {} unreadable", c.manifests_unreadable);
    if (fix) text += fmt::format(", {} removed", c.manifests_removed);
  }
  if (c.left != 0 && !fix && !store.refused() && bad + not_entries + c.manifests_bad != 0) {
    text += " (kiln cache verify --fix removes what is bad)";
  }
  if (store.refused()) {
    text += fmt::format("\nverify: the engine uses none of these entries: the cache is {}", store.mode_reason());
  } else if (store.mode() == cache::StoreMode::memory_only) {
    text += fmt::format("\nverify: the engine uses no disk cache: {}", store.mode_reason());
  }
  return text;
}

}  // namespace

int run_verify(const VerifyArgs& args) {
  // Opened quietly: the summary says why the engine uses none of the cache (once, not also as a warning).
  const auto store = open_store(/*quiet=*/true);
  // A refused cache is reported, as by verify, and nothing in it is removed: it is not this user's own
  // (a link, another owner, others may write it); the owner fixes it (exit 1, as a refused entry).
  const bool fix = args.fix && !store->refused();
  if (fix) require_writable(*store, "cache verify --fix");
  VerifyReport report;
  gather_entry_findings(*store, report);
  if (fix) fix_entries(*store, report);
  gather_manifest_findings(*store, report);
  if (fix) fix_manifests(report);
  // The precompiled headers, checked as a process checks one before its first use (trailer, key, checksum).
  const std::size_t pch_count = store->refused() ? 0 : pch_files(*store).size();
  const std::vector<PchFinding> pch = store->refused() ? std::vector<PchFinding>{} : verify_pch(*store, fix);
  const auto pch_left = static_cast<std::size_t>(
      std::count_if(pch.begin(), pch.end(), [](const PchFinding& f) { return !f.removed; }));

  const VerifyCounts counts = count_findings(report);
  if (args.json) {
    json document = verify_json(*store, report, counts);
    json list = json::array();
    for (const PchFinding& f : pch) list.push_back({{"path", f.path}, {"problem", f.problem}, {"removed", f.removed}});
    document["pch"] = {{"files", pch_count}, {"bad", std::move(list)}};
    print_json(document);
  } else {
    std::string pch_lines;
    for (const PchFinding& f : pch) {
      pch_lines += fmt::format("precompiled header {}: {}{}\n", f.path, f.problem, f.removed ? " (removed)" : "");
    }
    pch_lines += fmt::format("precompiled headers: {} files (PCHs and their records) checked, {} bad\n", pch_count,
                             pch.size());
    std::cout << findings_text(report, fix) + pch_lines + summary_text(*store, report, counts, fix) << '\n';
  }
  return counts.left + pch_left != 0 || store->refused() ? kExitFound : kExitOk;
}

}  // namespace kiln::cli
