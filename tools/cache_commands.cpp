// kiln cache ...: path, ls, show, stats, verify, prune, clear, export, import (why-miss: why_miss.cpp).
// Every entry is read with the engine's own parser (Store::scan_shard, Store::read_file, CanonicalKey::parse,
// diff_keys); nothing here knows the entry's byte layout.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <tuple>

#include <fmt/format.h>

#include "cache_inspect.hpp"
#include "common.hpp"
#include "kiln/cache/dep_manifest.hpp"
#include "kiln/cache/dependencies.hpp"
#include "kiln/cache/pack.hpp"
#include "kiln/cache/stats.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "tiers.hpp"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

json names_json(const std::vector<cache::LoweredName>& names) {
  json out = json::array();
  for (const cache::LoweredName& name : names)
    out.push_back({{"expression", name.expression}, {"lowered", name.lowered}});
  return out;
}

json headers_json(const std::optional<cache::DependencySet>& dependencies) {
  json out = json::array();
  if (dependencies) {
    for (const cache::HeaderRecord& h : dependencies->headers) out.push_back({{"path", h.path}, {"digest", h.digest.hex()}});
  }
  return out;
}


std::uint64_t total_size(const std::vector<cache::EntryFile>& files) {
  std::uint64_t total = 0;
  for (const cache::EntryFile& file : files) total += file.size;
  return total;
}

// ---- path ---------------------------------------------------------------------------------------------

int run_path() {
  const auto store = open_store();
  std::cout << store->config().root.string() << '\n';
  return kExitOk;
}

// ---- ls -------------------------------------------------------------------------------------------------

struct LsArgs {
  bool json = false;
  std::string sort;
  std::string target;
};

/// One listed entry: where its rendered text lies in its shard's buffer, and what the orders need.
struct LsRow {
  cache::Hash128 key;
  std::uint64_t size = 0;
  std::chrono::system_clock::time_point mtime;
  std::int64_t created_unix = 0;
  std::size_t offset = 0;  ///< in LsShard::text
  std::size_t length = 0;
};

/// What one shard directory contributes: its rows and their text, rendered on the scanning thread.
struct LsShard {
  std::string text;
  std::vector<LsRow> rows;
  std::size_t problems = 0;     ///< rows for entries that are not ok, and for things at entry paths
  std::size_t not_entries = 0;  ///< stray names (not shown as rows: they name no key)
};

/// The label of a row for an entry that is not ok ("DAMAGED", "UNREADABLE", "REFUSED"); lower case for JSON.
std::string_view state_label(EntryState state, bool upper = true) {
  switch (state) {
    case EntryState::unreadable:
      return upper ? "UNREADABLE" : "unreadable";
    case EntryState::refused:
      return upper ? "REFUSED" : "refused";
    default:
      return upper ? "DAMAGED" : "damaged";
  }
}

/// What a stray at an entry path is reported as: a damaged entry (the engine removes it on lookup).
std::string stray_problem(const cache::StrayFile& stray) {
  return fmt::format("a {} at an entry path, not an entry file", stray.kind);
}

std::string names_text(const cache::EntryHeaderView& header) {
  if (header.names_count == 0) return "(extern C names)";
  std::string out;
  header.for_each_name([&out](std::string_view expression, std::string_view) {
    if (!out.empty()) out += ", ";
    out += expression;
  });
  return out;
}

std::string source_text(const cache::EntryHeaderView& header) {
  const auto parts = cache::CanonicalKey::parse(header.canonical_key);
  return parts ? describe_source(*parts) : "?";
}

/// Appends one `ls --json` record, written directly (see append_json_string).
void append_entry_json(std::string& out, const cache::ScannedEntry& e, const std::string& problem) {
  out += "{\"key\":\"";
  out += e.file_hash.hex();
  out += "\",\"path\":";
  append_json_string(out, e.path);
  fmt::format_to(std::back_inserter(out), ",\"size\":{},\"last_use_unix\":{},\"valid\":{}", e.size, to_unix(e.mtime),
                 problem.empty());
  if (!problem.empty()) {
    out += ",\"error\":";
    append_json_string(out, problem);
    fmt::format_to(std::back_inserter(out), ",\"state\":\"{}\"}}", state_label(entry_state(e), false));
    return;
  }
  const cache::EntryHeaderView& h = *e.header;
  fmt::format_to(std::back_inserter(out), ",\"vendor\":\"{}\",\"payload_kind\":\"{}\",\"target\":", to_string(h.vendor),
                 to_string(h.payload_kind));
  append_json_string(out, h.target);
  out += ",\"compiler\":";
  append_json_string(out, h.compiler);
  fmt::format_to(std::back_inserter(out), ",\"created_unix\":{},\"source\":", h.created_unix);
  append_json_string(out, source_text(h));
  out += ",\"names\":[";
  bool first = true;
  h.for_each_name([&](std::string_view expression, std::string_view lowered) {
    out += first ? "{\"expression\":" : ",{\"expression\":";
    first = false;
    append_json_string(out, expression);
    out += ",\"lowered\":";
    append_json_string(out, lowered);
    out += '}';
  });
  fmt::format_to(std::back_inserter(out), "],\"payload_bytes\":{},\"aux_bytes\":{}}}", h.payload_bytes, h.aux_bytes);
}

constexpr const char* kLsColumns = "{:<16}  {:>10}  {:>8}  {:<5} {:<24} {:<20} {}\n";

void append_entry_line(std::string& out, const cache::ScannedEntry& e, const std::string& problem) {
  const std::string key = e.file_hash.hex().substr(0, 16);
  if (!problem.empty()) {
    fmt::format_to(std::back_inserter(out), "{:<16}  {:>10}  {:>8}  {}: {}\n", key, format_bytes(e.size),
                   format_age(e.mtime), state_label(entry_state(e)), one_line(problem));
    return;
  }
  const cache::EntryHeaderView& h = *e.header;
  fmt::format_to(std::back_inserter(out), fmt::runtime(kLsColumns), key, format_bytes(e.size), format_age(e.mtime),
                 to_string(h.vendor), h.target, source_text(h), names_text(h));
}

/// Writes `text` to stdout in large pieces.
class Output {
 public:
  Output() { m_buffer.reserve(kFlushBytes + 4096); }
  ~Output() { flush(); }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;
  void append(std::string_view text) {
    m_buffer += text;
    if (m_buffer.size() >= kFlushBytes) flush();
  }
  void flush() {
    std::fwrite(m_buffer.data(), 1, m_buffer.size(), stdout);
    m_buffer.clear();
  }

 private:
  static constexpr std::size_t kFlushBytes = 1 << 20;
  std::string m_buffer;
};

int run_ls(const LsArgs& args) {
  const auto store = open_store();
  // Headers only (no payload, no checksum: `kiln cache verify` checks whole entries), one shard directory
  // per task; each entry's output is formatted on the scanning thread, into its shard's buffer.
  std::vector<LsShard> shards(cache::Store::kShardCount);
  const auto add_row = [&](unsigned index, const cache::ScannedEntry& e, const std::string& problem) {
    LsShard& shard = shards[index];
    LsRow row;
    row.key = e.file_hash;
    row.size = e.size;
    row.mtime = e.mtime;
    row.created_unix = e.header != nullptr ? e.header->created_unix : 0;
    row.offset = shard.text.size();
    if (args.json) {
      append_entry_json(shard.text, e, problem);
    } else {
      append_entry_line(shard.text, e, problem);
    }
    row.length = shard.text.size() - row.offset;
    shard.rows.push_back(row);
    if (!problem.empty()) ++shard.problems;
  };
  scan_store(
      *store, cache::ScanDepth::header, true,
      [&](unsigned index, const cache::ScannedEntry& e) {
        const std::string problem = entry_problem(e);
        const bool readable = e.header != nullptr && entry_state(e) != EntryState::damaged;
        if (!args.target.empty() && (!readable || !target_matches(e.header->target, args.target))) return;
        // A refused entry's header is fine: it is listed as a problem row all the same.
        add_row(index, e, problem);
      },
      [&](unsigned index, const cache::StrayFile& stray) {
        if (!stray.file_hash) {
          ++shards[index].not_entries;
          return;
        }
        if (!args.target.empty()) return;
        const std::string problem = stray_problem(stray);
        cache::ScannedEntry e;
        e.path = stray.path;
        e.file_hash = *stray.file_hash;
        e.size = stray.size;
        e.mtime = stray.mtime;
        e.error = problem;
        add_row(index, e, problem);
      });

  struct Ref {
    const LsRow* row;
    const LsShard* shard;
  };
  std::vector<Ref> order;
  std::size_t count = 0;
  for (LsShard& shard : shards) {
    // Shard directories hold keys by their first byte: key order is shard order, then key order within.
    std::sort(shard.rows.begin(), shard.rows.end(),
              [](const LsRow& a, const LsRow& b) { return key_order(a.key, b.key); });
    count += shard.rows.size();
  }
  order.reserve(count);
  for (const LsShard& shard : shards) {
    for (const LsRow& row : shard.rows) order.push_back({&row, &shard});
  }
  const auto sort_by = [&](auto less) {
    std::stable_sort(order.begin(), order.end(), [&](const Ref& a, const Ref& b) { return less(*a.row, *b.row); });
  };
  if (args.sort == "size") {
    sort_by([](const LsRow& a, const LsRow& b) { return a.size > b.size; });
  } else if (args.sort == "age") {
    sort_by([](const LsRow& a, const LsRow& b) { return a.created_unix < b.created_unix; });
  } else if (args.sort == "use") {
    sort_by([](const LsRow& a, const LsRow& b) { return a.mtime < b.mtime; });
  }

  std::size_t problems = 0;
  std::size_t not_entries = 0;
  for (const LsShard& shard : shards) {
    problems += shard.problems;
    not_entries += shard.not_entries;
  }
  Output out;
  std::uint64_t bytes = 0;
  if (args.json) {
    out.append("[");
  } else {
    out.append(fmt::format(fmt::runtime(kLsColumns), "KEY", "SIZE", "USED", "LANE", "TARGET", "SOURCE", "KERNELS"));
  }
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (args.json && i > 0) out.append(",");
    out.append(std::string_view(order[i].shard->text).substr(order[i].row->offset, order[i].row->length));
    bytes += order[i].row->size;
  }
  if (args.json) {
    out.append("]\n");
  } else {
    std::string summary = fmt::format("{} entries, {}", order.size(), format_bytes(bytes));
    if (problems != 0) summary += fmt::format("; {} not usable (kiln cache verify says more)", problems);
    if (not_entries != 0) {
      summary += fmt::format("; {} other files in the entry directories (kiln cache verify lists them)", not_entries);
    }
    if (store->refused()) summary += fmt::format("; the engine uses none of them: {}", store->mode_reason());
    out.append(summary + "\n");
  }
  out.flush();
  if (args.json && not_entries != 0) {
    std::cerr << fmt::format("kiln: {} other files in the entry directories (kiln cache verify lists them)\n",
                             not_entries);
  }
  // Exit 1 when something is wrong (README: a bad entry is "found"), 0 for a clean listing.
  return problems + not_entries != 0 || store->refused() ? kExitFound : kExitOk;
}

// ---- show -------------------------------------------------------------------------------------------------

struct ShowArgs {
  std::string prefix;
  std::string dump;
  bool json = false;
};

/// A key part's value as one short line: the value itself when short and printable, else its size,
/// hash and first line.
std::string summarize_part(const std::string& value) {
  const bool printable = std::all_of(value.begin(), value.end(), [](char c) {
    return c == '\n' || (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
  });
  if (printable && value.size() <= 160) return value.empty() ? "(empty)" : one_line(value);
  std::string first = value.substr(0, value.find('\n'));
  if (first.size() > 60) first = first.substr(0, 60) + "...";
  if (!printable) first = "(binary)";
  return fmt::format("{}, hash {}, starts \"{}\"", format_bytes(value.size()),
                     cache::hash128(value).hex().substr(0, 16), first);
}

cache::EntryFile find_by_prefix(const std::vector<cache::EntryFile>& files, std::string prefix, const fs::path& root) {
  std::transform(prefix.begin(), prefix.end(), prefix.begin(), [](unsigned char c) { return std::tolower(c); });
  if (prefix.empty() || prefix.size() > 32 ||
      !std::all_of(prefix.begin(), prefix.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
    throw UsageError(fmt::format("'{}' is not a key prefix (1 to 32 hex digits, as `kiln cache ls` prints)", prefix));
  }
  std::vector<const cache::EntryFile*> matches;
  for (const cache::EntryFile& file : files) {
    if (file.file_hash.hex().starts_with(prefix)) matches.push_back(&file);
  }
  if (matches.empty()) throw UsageError(fmt::format("no entry with key prefix {} in {}", prefix, root.string()));
  if (matches.size() > 1) {
    std::string some;
    for (std::size_t i = 0; i < matches.size() && i < 4; ++i) {
      some += ' ';  // (not " " + hex: GCC 12 misreports that concatenation, -Wrestrict)
      some.append(matches[i]->file_hash.hex(), 0, 16);
    }
    throw UsageError(fmt::format("key prefix {} is ambiguous: {} entries match ({}{}); give more digits", prefix,
                                 matches.size(), some.substr(1), matches.size() > 4 ? " ..." : ""));
  }
  return *matches.front();
}


int run_show(const ShowArgs& args) {
  const auto store = open_store();
  const cache::EntryFile file = find_by_prefix(store->list(), args.prefix, store->config().root);
  // A refused entry is shown (it is there to inspect), and said to be refused: something found (exit 1).
  const std::string refusal = entry_refusal(*store, file.file_hash, file.path);
  const int found = refusal.empty() ? kExitOk : kExitFound;
  auto parsed = store->read_file(file.path);
  if (auto* error = std::get_if<cache::ContentError>(&parsed)) {
    // A bad entry is something found (exit 1), not bad input.
    const bool io = error->reason.starts_with("cannot open") || error->reason.starts_with("cannot stat") ||
                    error->reason.starts_with("I/O error");
    if (args.json) {
      print_json({{"key", file.file_hash.hex()},
                  {"path", file.path.string()},
                  {"valid", false},
                  {"state", io ? "unreadable" : "bad"},
                  {"error", error->reason}});
    } else {
      std::cout << fmt::format("entry {} ({}) {}: {}\n", file.file_hash.hex(), file.path.string(),
                               io ? "cannot be read" : "is damaged", one_line(error->reason));
    }
    return kExitFound;
  }
  const cache::Entry& entry = std::get<cache::Entry>(parsed);
  const auto parts = cache::CanonicalKey::parse(entry.canonical_key);

  if (!args.dump.empty()) {
    if (args.dump == "-") {
      std::cout.write(reinterpret_cast<const char*>(entry.payload.data()),
                      static_cast<std::streamsize>(entry.payload.size()));
      std::cout.flush();
      if (!refusal.empty()) std::cerr << fmt::format("kiln: warning: entry {} is {}\n", file.file_hash.hex(), refusal);
      return found;
    }
    std::ofstream out(args.dump, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(entry.payload.data()), static_cast<std::streamsize>(entry.payload.size()));
    out.close();
    if (!out) throw std::runtime_error(fmt::format("--dump {}: cannot write the payload", args.dump));
    std::cerr << fmt::format("wrote the {} payload ({}) to {}\n", to_string(entry.payload_kind),
                             format_bytes(entry.payload.size()), args.dump);
  }

  // A request with include folders: its key holds the digest of every header it read; the list (path and
  // digest) is in the request's dependency manifest.
  std::optional<cache::DependencySummary> summary;
  std::optional<cache::DependencySet> dependencies;
  if (parts) {
    if (const std::string* text = find_part(*parts, "dependencies")) {
      summary = cache::parse_canonical_dependencies(*text);
      dependencies = recorded_dependencies(*store, *parts, entry.key_hash);
    }
  }

  if (args.json) {
    json key_parts = json::array();
    if (parts) {
      for (const cache::KeyPart& part : *parts) {
        json item = {{"name", part.name}, {"size", part.value.size()}, {"hash", cache::hash128(part.value).hex()}};
        if (part.value.size() <= 4096) item["value"] = part.value;
        key_parts.push_back(std::move(item));
      }
    }
    print_json({{"key", entry.key_hash.hex()},
                {"path", file.path.string()},
                {"file_size", file.size},
                {"last_use_unix", to_unix(file.mtime)},
                {"vendor", std::string(to_string(entry.vendor))},
                {"payload_kind", std::string(to_string(entry.payload_kind))},
                {"payload_bytes", entry.payload.size()},
                {"aux_bytes", entry.aux.size()},
                {"target", entry.target},
                {"compiler", entry.compiler},
                {"created_unix", entry.created_unix},
                {"source", parts ? describe_source(*parts) : "?"},
                {"names", names_json(entry.names)},
                {"canonical_key_bytes", entry.canonical_key.size()},
                {"key_parts", std::move(key_parts)},
                {"headers", headers_json(dependencies)},
                {"absent_paths", dependencies ? json(dependencies->absent) : json::array()},
                {"headers_count", summary ? json(summary->headers) : json(nullptr)},
                {"absent_count", summary ? json(summary->absent) : json(nullptr)},
                {"headers_listed", dependencies.has_value()},
                {"refused", refusal}});
    return found;
  }

  std::string text;
  text += fmt::format("key       {}\n", entry.key_hash.hex());
  if (!refusal.empty()) text += fmt::format("REFUSED   {}: the engine does not use this entry\n", refusal);
  text += fmt::format("file      {} ({}, last used {} ago)\n", file.path.string(), format_bytes(file.size),
                      format_age(file.mtime));
  text += fmt::format("vendor    {}\n", to_string(entry.vendor));
  text += fmt::format("payload   {} {}", to_string(entry.payload_kind), format_bytes(entry.payload.size()));
  if (!entry.aux.empty()) text += fmt::format(" (+ PTX {})", format_bytes(entry.aux.size()));
  text += '\n';
  text += fmt::format("target    {}\n", entry.target);
  text += fmt::format("compiler  {}\n", entry.compiler);
  text += fmt::format("created   {}\n", format_time(entry.created_unix));
  text += fmt::format("source    {}\n", parts ? describe_source(*parts) : "?");
  if (entry.names.empty()) text += "kernels   (no name expressions: extern \"C\" kernels by their own names)\n";
  for (std::size_t i = 0; i < entry.names.size(); ++i) {
    text += fmt::format("{}{} -> {}\n", i == 0 ? "kernels   " : "          ", entry.names[i].expression,
                        entry.names[i].lowered);
  }
  if (summary) {
    text += fmt::format("headers   {} read from include folders ({} paths probed and found absent)", summary->headers,
                        summary->absent);
    if (dependencies) {
      text += ":\n";
      for (const cache::HeaderRecord& header : dependencies->headers) {
        text += fmt::format("          {}  {}\n", header.digest.hex(), header.path);
      }
    } else {
      text += "; the list is in the request's dependency manifest, which this cache does not hold\n";
    }
  }
  if (!parts) {
    text += "canonical key: does not follow the key grammar\n";
  } else {
    text += fmt::format("canonical key ({} parts, {}):\n", parts->size(), format_bytes(entry.canonical_key.size()));
    std::size_t width = 0;
    for (const cache::KeyPart& part : *parts) width = std::max(width, part.name.size());
    for (const cache::KeyPart& part : *parts) {
      text += fmt::format("  {:<{}}  {}\n", part.name, width, summarize_part(part.value));
    }
  }
  std::cout << text;
  return found;
}

// ---- stats ------------------------------------------------------------------------------------------------

struct StatsArgs {
  bool json = false;
  bool zero = false;
};

int run_stats(const StatsArgs& args) {
  const auto store = open_store();
  cache::PersistentStats persistent(store->config().root);
  if (args.zero) {
    require_writable(*store, "cache stats --zero");
    persistent.zero();
    std::cout << "lifetime counters zeroed\n";
    return kExitOk;
  }
  // The fixed header and target of each entry (no payload, no checksum: `kiln cache verify` checks
  // those); sizes from the read where it reached the end of the file.
  struct Group {
    Vendor vendor = Vendor::none;
    std::string target;
    std::size_t entries = 0;
    std::uint64_t bytes = 0;
  };
  struct Tally {
    std::size_t entries = 0;
    std::size_t damaged = 0;
    std::size_t unreadable = 0;
    std::size_t refused = 0;
    std::size_t not_entries = 0;  // links, FIFOs, ... at entry paths and stray names
    std::uint64_t bytes = 0;
    std::vector<Group> groups;  // few: one per lane and target
  };
  std::vector<Tally> tallies(cache::Store::kShardCount);
  scan_store(
      *store, cache::ScanDepth::lane, false,
      [&](unsigned index, const cache::ScannedEntry& e) {
        Tally& tally = tallies[index];
        ++tally.entries;
        tally.bytes += e.size;
        const EntryState state = entry_state(e);
        if (state == EntryState::damaged || state == EntryState::unreadable) {
          ++(state == EntryState::damaged ? tally.damaged : tally.unreadable);
          return;
        }
        if (state == EntryState::refused) ++tally.refused;
        auto group = std::find_if(tally.groups.begin(), tally.groups.end(), [&](const Group& g) {
          return g.vendor == e.header->vendor && g.target == e.header->target;
        });
        if (group == tally.groups.end()) {
          tally.groups.push_back({e.header->vendor, std::string(e.header->target), 0, 0});
          group = std::prev(tally.groups.end());
        }
        ++group->entries;
        group->bytes += e.size;
      },
      [&](unsigned index, const cache::StrayFile&) { ++tallies[index].not_entries; });
  std::map<std::pair<std::string, std::string>, Group> groups;
  std::size_t entries = 0;
  std::size_t damaged = 0;
  std::size_t unreadable = 0;
  std::size_t refused = 0;
  std::size_t not_entries = 0;
  std::uint64_t bytes = 0;
  for (const Tally& tally : tallies) {
    entries += tally.entries;
    damaged += tally.damaged;
    unreadable += tally.unreadable;
    refused += tally.refused;
    not_entries += tally.not_entries;
    bytes += tally.bytes;
    for (const Group& g : tally.groups) {
      Group& group = groups[{std::string(to_string(g.vendor)), g.target}];
      group.entries += g.entries;
      group.bytes += g.bytes;
    }
  }
  // Dependency manifests (requests with include folders): how many, and how many are damaged.
  const cache::DependencyManifests manifests(store->refused() ? fs::path() : store->config().root, /*read_only=*/true);
  std::size_t manifest_count = 0;
  std::size_t manifest_damaged = 0;
  std::uint64_t manifest_bytes = 0;
  for (const cache::ScannedManifest& m : manifests.scan()) {
    ++manifest_count;
    manifest_bytes += m.size;
    if (!m.error.empty()) ++manifest_damaged;
  }
  const cache::Counters total = persistent.load_total();
  const std::uint64_t hits = total.memory_hits + total.disk_hits + total.remote_hits;
  // Exit 1 when something is wrong (README: a bad entry is "found"), 0 for a clean cache.
  const int status = damaged + unreadable + refused + not_entries != 0 || store->refused() ? kExitFound : kExitOk;

  if (args.json) {
    json by_target = json::array();
    for (const auto& [key, group] : groups) {
      by_target.push_back(
          {{"vendor", key.first}, {"target", key.second}, {"entries", group.entries}, {"bytes", group.bytes}});
    }
    print_json({{"root", store->config().root.string()},
                {"mode", std::string(cache::to_string(store->mode()))},
                {"entries", entries},
                {"bytes", bytes},
                {"max_size", store->config().max_size},
                {"damaged", damaged},
                {"unreadable", unreadable},
                {"refused", refused},
                {"not_entries", not_entries},
                {"refused_root", store->refused() ? store->mode_reason() : std::string()},
                {"manifests", {{"count", manifest_count}, {"bytes", manifest_bytes}, {"damaged", manifest_damaged}}},
                {"by_target", std::move(by_target)},
                {"lifetime",
                 {{"memory_hits", total.memory_hits},
                  {"disk_hits", total.disk_hits},
                  {"remote_hits", total.remote_hits},
                  {"misses", total.misses},
                  {"hit_ratio", total.hit_ratio()},
                  {"compiles", total.compiles},
                  {"compile_failures", total.compile_failures},
                  {"compile_seconds", total.compile_seconds()},
                  {"corrupt_removed", total.corrupt_removed},
                  {"evictions", total.evictions},
                  {"bytes_written", total.bytes_written},
                  {"bytes_read", total.bytes_read},
                  {"remote_misses", total.remote_misses},
                  {"remote_errors", total.remote_errors},
                  {"manifest_hits", total.manifest_hits},
                  {"include_resolves", total.include_resolves},
                  {"remote_unauthenticated", total.remote_unauthenticated}}}});
    return status;
  }

  std::string text;
  text += fmt::format("cache             {} ({})\n", store->config().root.string(), cache::to_string(store->mode()));
  text += fmt::format("entries           {} ({} of a {} limit)\n", entries, format_bytes(bytes),
                      format_bytes(store->config().max_size));
  for (const auto& [key, group] : groups) {
    text += fmt::format("  {:<4} {:<24} {:>7} entries  {:>10}\n", key.first, key.second, group.entries,
                        format_bytes(group.bytes));
  }
  if (store->refused()) text += fmt::format("refused           the engine uses none of it: {}\n", store->mode_reason());
  if (damaged > 0) text += fmt::format("damaged           {} (kiln cache verify --fix removes them)\n", damaged);
  if (unreadable > 0)
    text += fmt::format("unreadable        {} (cannot be opened or read; kiln cache verify lists them)\n", unreadable);
  if (refused > 0)
    text += fmt::format("refused           {} (in a shard directory others may write; kiln cache verify lists them)\n",
                        refused);
  if (not_entries > 0) {
    text += fmt::format("not entries       {} (links, FIFOs, stray files; kiln cache verify --fix removes them)\n",
                        not_entries);
  }
  if (manifest_count > 0) {
    text += fmt::format("manifests         {} ({}) for requests with include folders{}\n", manifest_count,
                        format_bytes(manifest_bytes),
                        manifest_damaged == 0 ? std::string()
                                              : fmt::format(", {} damaged (the engine replaces them)", manifest_damaged));
  }
  text += "lifetime (every process, since the counters were last zeroed):\n";
  text +=
      fmt::format("  hit ratio       {:.1f}% ({} hits, {} misses)\n", 100.0 * total.hit_ratio(), hits, total.misses);
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
    text += fmt::format("  remote          {} misses, {} errors\n", total.remote_misses, total.remote_errors);
  }
  if (total.remote_unauthenticated > 0) {
    text += fmt::format("  unauthenticated {} remote entries refused for a missing or wrong MAC (deleted)\n",
                        total.remote_unauthenticated);
  }
  std::cout << text;
  return status;
}

// ---- verify -----------------------------------------------------------------------------------------------

struct VerifyArgs {
  bool fix = false;
  bool json = false;
};

int run_verify(const VerifyArgs& args) {
  const auto store = open_store();
  if (args.fix) require_writable(*store, "cache verify --fix");
  // Whole entries, verified as Store::get verifies them (checksum and stored key), on io threads.
  enum class Kind : std::uint8_t { damaged, unreadable, refused, not_entry };
  struct Finding {
    Kind kind = Kind::damaged;
    std::optional<cache::Hash128> key;  // none for a stray name
    std::string path;
    std::string error;
    bool directory = false;
  };
  struct Tally {
    std::size_t entries = 0;
    std::vector<Finding> findings;
  };
  std::vector<Tally> tallies(cache::Store::kShardCount);
  scan_store(
      *store, cache::ScanDepth::entry, false,
      [&](unsigned index, const cache::ScannedEntry& e) {
        Tally& tally = tallies[index];
        ++tally.entries;
        const EntryState state = entry_state(e);
        if (state == EntryState::ok) return;
        const Kind kind = state == EntryState::damaged      ? Kind::damaged
                          : state == EntryState::unreadable ? Kind::unreadable
                                                            : Kind::refused;
        tally.findings.push_back({kind, e.file_hash, std::string(e.path), entry_problem(e), false});
      },
      [&](unsigned index, const cache::StrayFile& stray) {
        tallies[index].findings.push_back(
            {Kind::not_entry, stray.file_hash, std::string(stray.path),
             stray.file_hash ? stray_problem(stray) : fmt::format("a {} that is not a cache entry", stray.kind),
             stray.is_directory()});
      });
  std::size_t entries = 0;
  std::vector<Finding> findings;
  for (Tally& tally : tallies) {
    entries += tally.entries;
    std::sort(tally.findings.begin(), tally.findings.end(),
              [](const Finding& a, const Finding& b) { return a.path < b.path; });
    std::move(tally.findings.begin(), tally.findings.end(), std::back_inserter(findings));
  }
  std::size_t count[4] = {0, 0, 0, 0};
  std::size_t removed = 0;
  std::size_t left = 0;  // findings still there after this run
  json bad_json = json::array();
  std::string text;
  for (const Finding& f : findings) {
    ++count[static_cast<int>(f.kind)];
    // Only what is proven bad by its bytes, or is no entry at all, is removed. An entry that could not
    // be read may be fine (a transient error, a permission), and a refused one is the owner's to fix.
    const bool removable = f.kind == Kind::damaged || (f.kind == Kind::not_entry && !f.directory);
    bool gone = false;
    std::string note;
    if (args.fix && removable) {
      if (::unlink(f.path.c_str()) == 0 || errno == ENOENT) {
        gone = true;
        ++removed;
      } else {
        note = fmt::format(" (cannot remove: {})", std::error_code(errno, std::system_category()).message());
      }
    } else if (args.fix) {
      note = f.kind == Kind::unreadable ? " (not removed: a read error does not prove the entry bad)"
             : f.kind == Kind::refused  ? " (not removed: make it mode 0600 in a 0700 directory, or remove it)"
                                        : " (not removed: a directory)";
    }
    if (gone) note = " (removed)";
    if (!gone) ++left;
    static constexpr const char* kLabel[] = {"bad", "unreadable", "refused", "not an entry"};
    static constexpr const char* kState[] = {"damaged", "unreadable", "refused", "not_entry"};
    const std::string key = f.key ? f.key->hex() : std::string();
    bad_json.push_back({{"key", key},
                        {"path", f.path},
                        {"error", f.error},
                        {"state", kState[static_cast<int>(f.kind)]},
                        {"removed", gone}});
    text += fmt::format("{}: {}{}{}: {}{}\n", kLabel[static_cast<int>(f.kind)], key, key.empty() ? "" : " ", f.path,
                        one_line(f.error), note);
  }
  if (removed != 0) (void)store->remeasure_size();  // the running size total, after removing files

  // Dependency manifests (requests with include folders): each parsed and checked as a lookup would. A
  // damaged one only costs a resolve (the engine replaces it); --fix removes it.
  std::size_t manifests_total = 0, manifests_bad = 0, manifests_unreadable = 0, manifests_removed = 0;
  json bad_manifests = json::array();
  if (!store->refused()) {
    const cache::DependencyManifests manifests(store->config().root, /*read_only=*/true);
    for (const cache::ScannedManifest& m : manifests.scan()) {
      ++manifests_total;
      if (m.error.empty()) continue;
      const bool io = m.error.starts_with("cannot open") || m.error.starts_with("cannot stat") ||
                      m.error.starts_with("I/O error");
      ++(io ? manifests_unreadable : manifests_bad);
      bool gone = false;
      std::string note;
      if (args.fix && !io) {
        if (::unlink(m.path.c_str()) == 0 || errno == ENOENT) {
          gone = true;
          ++manifests_removed;
          note = " (removed)";
        } else {
          note = fmt::format(" (cannot remove: {})", std::error_code(errno, std::system_category()).message());
        }
      } else if (args.fix) {
        note = " (not removed: a read error does not prove the manifest bad)";
      }
      if (!gone) ++left;
      const std::string request = m.in_place_of_folder ? std::string() : m.request_key.hex();
      bad_manifests.push_back({{"request", request},
                               {"path", m.path.string()},
                               {"error", m.error},
                               {"state", io ? "unreadable" : "damaged"},
                               {"removed", gone}});
      text += fmt::format("{} manifest: {}{}{}: {}{}\n", io ? "unreadable" : "bad", request, request.empty() ? "" : " ",
                          m.path.string(), one_line(m.error), note);
    }
  }
  const std::size_t bad = count[static_cast<int>(Kind::damaged)];
  const std::size_t unreadable = count[static_cast<int>(Kind::unreadable)];
  const std::size_t refused = count[static_cast<int>(Kind::refused)];
  const std::size_t not_entries = count[static_cast<int>(Kind::not_entry)];
  if (args.json) {
    print_json({{"entries", entries},
                {"ok", entries - bad - unreadable - refused},
                {"bad", bad},
                {"unreadable", unreadable},
                {"refused", refused},
                {"not_entries", not_entries},
                {"removed", removed},
                {"refused_root", store->refused() ? store->mode_reason() : std::string()},
                {"bad_entries", std::move(bad_json)},
                {"manifests",
                 {{"count", manifests_total},
                  {"ok", manifests_total - manifests_bad - manifests_unreadable},
                  {"bad", manifests_bad},
                  {"unreadable", manifests_unreadable},
                  {"removed", manifests_removed}}},
                {"bad_manifests", std::move(bad_manifests)}});
  } else {
    text += fmt::format("verify: {} entries: {} ok, {} bad", entries, entries - bad - unreadable - refused, bad);
    if (unreadable != 0) text += fmt::format(", {} unreadable", unreadable);
    if (refused != 0) text += fmt::format(", {} refused", refused);
    if (not_entries != 0) text += fmt::format("; {} files that are not entries", not_entries);
    if (args.fix) text += fmt::format("; {} removed", removed);
    if (manifests_total != 0) {
      text += fmt::format("; {} dependency manifests: {} ok, {} bad", manifests_total,
                          manifests_total - manifests_bad - manifests_unreadable, manifests_bad);
      if (manifests_unreadable != 0) text += fmt::format(", {} unreadable", manifests_unreadable);
      if (args.fix) text += fmt::format(", {} removed", manifests_removed);
    }
    if (left != 0 && !args.fix && bad + not_entries + manifests_bad != 0) {
      text += " (kiln cache verify --fix removes what is bad)";
    }
    if (store->refused()) {
      text += fmt::format("\nverify: the engine uses none of these entries: the cache is {}", store->mode_reason());
    }
    std::cout << text << '\n';
  }
  return left != 0 || store->refused() ? kExitFound : kExitOk;
}

// ---- prune / clear -----------------------------------------------------------------------------------------

struct PruneArgs {
  std::string max_size;
  std::string older_than;
  std::string target;
  bool dry_run = false;
  bool json = false;
};

int run_prune(const PruneArgs& args) {
  if (args.max_size.empty() && args.older_than.empty() && args.target.empty()) {
    throw UsageError("prune needs --max-size SIZE, --older-than AGE or --target T");
  }
  // Plain values with flags rather than std::optional: GCC 12 misreports optionals here (-Wmaybe-uninitialized).
  const bool by_size = !args.max_size.empty();
  const bool by_age = !args.older_than.empty();
  const std::uint64_t max_size = by_size ? parse_size_flag(args.max_size, "--max-size") : 0;
  const std::chrono::seconds older_than = by_age ? parse_age(args.older_than, "--older-than") : std::chrono::seconds(0);
  if (!args.target.empty()) {
    // Only the shape is checked: entries for a target this kiln cannot compile may still be pruned.
    const std::string& t = args.target;
    if (!(t.starts_with("sm_") || t.starts_with("compute_") || t.starts_with("gfx"))) {
      throw UsageError(fmt::format("--target {}: not a target id (expected sm_XX, compute_XX or gfxNNN...)", t));
    }
  }
  const auto store = open_store();
  if (!args.dry_run) require_writable(*store, "cache prune");
  const std::vector<cache::EntryFile> files = store->list();
  const std::uint64_t before = total_size(files);

  // Eligible entries, least recently used first (the order Store::trim evicts in).
  std::vector<EntrySummary> eligible;
  if (!args.target.empty()) {
    // Each entry's target from its header (with its size and last use from the same open file).
    std::vector<std::vector<EntrySummary>> shards(cache::Store::kShardCount);
    scan_store(*store, cache::ScanDepth::lane, true, [&](unsigned index, const cache::ScannedEntry& e) {
      const EntryState state = entry_state(e);
      if (state == EntryState::damaged || state == EntryState::unreadable ||
          !target_matches(e.header->target, args.target)) {
        return;
      }
      shards[index].push_back(
          {cache::EntryFile{std::string(e.path), e.file_hash, e.size, e.mtime}, true, std::string(e.header->target)});
    });
    for (auto& shard : shards) std::move(shard.begin(), shard.end(), std::back_inserter(eligible));
  } else {
    eligible.resize(files.size());
    for (std::size_t i = 0; i < files.size(); ++i) eligible[i].file = files[i];
  }
  if (by_age) {
    const auto cutoff = std::chrono::system_clock::now() - older_than;
    std::erase_if(eligible, [&](const EntrySummary& e) { return e.file.mtime >= cutoff; });
  }
  std::sort(eligible.begin(), eligible.end(), [](const EntrySummary& a, const EntrySummary& b) {
    return a.file.mtime != b.file.mtime ? a.file.mtime < b.file.mtime : key_order(a.file, b.file);
  });
  std::vector<const EntrySummary*> chosen;
  std::uint64_t remaining = before;
  for (const EntrySummary& e : eligible) {
    if (by_size && remaining <= max_size) break;
    chosen.push_back(&e);
    remaining -= std::min(remaining, e.file.size);
  }

  // An entry used since the listing (its mtime moved) is no longer among the least recently used: kept.
  std::vector<bool> gone(chosen.size(), true);
  if (!args.dry_run) {
    std::vector<const cache::EntryFile*> targets;
    for (const EntrySummary* e : chosen) targets.push_back(&e->file);
    gone = remove_files(targets, true);
    (void)store->remeasure_size();  // the running size total, after removing files behind the store
  }
  std::size_t removed = 0;
  std::uint64_t freed = 0;
  json list = json::array();
  std::string text;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    if (!gone[i]) continue;
    const EntrySummary& e = *chosen[i];
    ++removed;
    freed += e.file.size;
    if (args.dry_run) {
      text += fmt::format("would remove {} {:>10}  last used {} ago{}\n", e.file.file_hash.hex(),
                          format_bytes(e.file.size), format_age(e.file.mtime), e.target.empty() ? "" : "  " + e.target);
      if (args.json) list.push_back({{"key", e.file.file_hash.hex()}, {"size", e.file.size}});
    }
  }
  if (args.json) {
    print_json({{"removed", removed},
                {"bytes_before", before},
                {"bytes_after", before - freed},
                {"dry_run", args.dry_run},
                {"entries", std::move(list)}});
    return kExitOk;
  }
  text += fmt::format("prune: {} {} entries ({} freed); cache {} {}\n", args.dry_run ? "would remove" : "removed",
                      removed, format_bytes(freed), args.dry_run ? "would be" : "now", format_bytes(before - freed));
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

int run_clear() {
  const auto store = open_store();
  require_writable(*store, "cache clear");
  const std::vector<cache::EntryFile> files = store->list();
  std::vector<const cache::EntryFile*> targets;
  for (const cache::EntryFile& file : files) targets.push_back(&file);
  const std::vector<bool> gone = remove_files(targets, false);
  (void)store->remeasure_size();  // the running size total, after removing files behind the store
  std::size_t removed = 0;
  std::uint64_t freed = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (!gone[i]) continue;
    ++removed;
    freed += files[i].size;
  }
  // The dependency manifests name entries by key: without their entries they would only cost a lookup,
  // but "clear" means nothing of this cache is left.
  cache::DependencyManifests manifests(store->config().root, /*read_only=*/false);
  const std::size_t manifests_removed = manifests.mode() == cache::StoreMode::read_write ? manifests.clear() : 0;
  std::cout << fmt::format("clear: removed {} entries ({}){} from {}\n", removed, format_bytes(freed),
                           manifests_removed == 0 ? std::string()
                                                  : fmt::format(" and {} dependency manifests", manifests_removed),
                           store->config().root.string());
  return removed == files.size() ? kExitOk : kExitFound;
}

// ---- export / import --------------------------------------------------------------------------------------

struct ExportArgs {
  std::string file;
  std::vector<std::string> targets;
};

int run_export(const ExportArgs& args) {
  const auto store = open_store();
  // A pack is trusted wherever it is mounted: what the engine refuses here must not leave in one.
  if (store->refused()) {
    throw std::runtime_error(fmt::format("cache export: the cache at {} is {}; nothing exported",
                                         store->config().root.string(), store->mode_reason()));
  }
  std::set<std::string> refused;  // entry paths the engine refuses for their (or their shard's) mode
  std::mutex refused_mutex;
  scan_store(*store, cache::ScanDepth::header, /*with_mtime=*/true, [&](unsigned, const cache::ScannedEntry& e) {
    if (e.refused.empty()) return;
    const std::lock_guard lock(refused_mutex);
    refused.insert(std::string(e.path));
  });
  cache::PackWriter writer(args.file);  // removes its temp file unless committed
  std::size_t skipped = 0;
  std::size_t skipped_refused = 0;
  std::map<std::string, std::size_t> per_target;  // --target -> entries it matched
  for (const std::string& target : args.targets) per_target[target] = 0;
  std::set<std::string> present;  // every entry's target, to name them when a --target matched none
  for (const cache::EntryFile& file : store->list()) {
    if (refused.count(file.path.string()) != 0) {
      ++skipped_refused;
      std::cerr << fmt::format("kiln: warning: skipped refused entry {}: {}\n", file.file_hash.hex(),
                               entry_refusal(*store, file.file_hash, file.path));
      continue;
    }
    auto parsed = store->read_file(file.path);
    auto* entry = std::get_if<cache::Entry>(&parsed);
    if (entry == nullptr || entry->key_hash != file.file_hash) {
      ++skipped;
      std::cerr << fmt::format("kiln: warning: skipped damaged entry {}: {}\n", file.file_hash.hex(),
                               entry ? "file name names another key" : std::get<cache::ContentError>(parsed).reason);
      continue;
    }
    present.insert(entry->target);
    bool wanted = args.targets.empty();
    for (auto& [target, matched] : per_target) {
      if (target_matches(entry->target, target)) {
        ++matched;
        wanted = true;
      }
    }
    if (wanted) writer.add(*entry);
  }
  // A --target that matched nothing is a mistake (a typo, or a target never compiled here): write no
  // pack, rather than one that silently lacks what was asked for.
  std::vector<std::string> unmatched;
  for (const auto& [target, matched] : per_target) {
    if (matched == 0) unmatched.push_back(target);
  }
  if (!unmatched.empty()) {
    throw UsageError(fmt::format("cache export: no entry for target {} (targets in the cache: {}); nothing written",
                                 fmt::join(unmatched, ", "), present.empty() ? "none" : fmt::format("{}", fmt::join(present, ", "))));
  }
  const std::size_t count = writer.size();
  const std::uint64_t bytes = writer.data_bytes();
  writer.commit();
  std::cout << fmt::format("export: {} entries ({}) to {}{}{}\n", count, format_bytes(bytes), args.file,
                           skipped > 0 ? fmt::format("; skipped {} damaged", skipped) : std::string(),
                           skipped_refused > 0 ? fmt::format("; skipped {} refused", skipped_refused) : std::string());
  return skipped + skipped_refused == 0 ? kExitOk : kExitFound;  // a damaged or refused entry is something found
}

struct ImportArgs {
  std::string file;
};

int run_import(const ImportArgs& args) {
  const auto pack = cache::PackReader::open(args.file);
  const auto store = open_store();
  require_writable(*store, "cache import");
  std::size_t imported = 0;
  std::size_t present = 0;
  std::size_t rejected = 0;
  std::size_t failed = 0;
  for (const cache::PackRecord& record : pack->records()) {
    auto parsed = pack->read(record);
    if (auto* error = std::get_if<cache::ContentError>(&parsed)) {
      ++rejected;
      std::cerr << fmt::format("kiln: warning: rejected {}: {}\n", record.key.hex(), error->reason);
      continue;
    }
    const cache::Entry& entry = std::get<cache::Entry>(parsed);
    auto existing = store->read_file(store->entry_path(entry.key_hash));
    if (const auto* old = std::get_if<cache::Entry>(&existing); old && old->canonical_key == entry.canonical_key) {
      ++present;
      continue;
    }
    if (store->put(entry)) {
      ++imported;
    } else {
      ++failed;
    }
  }
  std::cout << fmt::format("import: {} entries from {}: {} imported, {} already present, {} rejected, {} failed\n",
                           pack->records().size(), args.file, imported, present, rejected, failed);
  return rejected + failed == 0 ? kExitOk : kExitFound;
}

}  // namespace

/// Why the engine would not use the entry file at `path` whatever its bytes: the cache root is refused
/// (the store is memory-only), or the file or its shard directory is not ours or is group/world-
/// writable. Empty when it would. Asks the store's own scan (the rule the engine applies), for the one
/// shard directory that holds the file.
std::string entry_refusal(const cache::Store& store, const cache::Hash128& key, const fs::path& path) {
  if (store.refused()) return store.mode_reason();
  std::string why;
  store.scan_shard(static_cast<unsigned>(key.high >> 56), cache::ScanDepth::header, /*with_mtime=*/true,
                   [&](const cache::ScannedEntry& e) {
                     if (e.path == path.string() && !e.refused.empty()) why = fmt::format("refused: {}", e.refused);
                   });
  return why;
}

/// For an entry of a request with include folders (its key ends in a "dependencies" part, which holds
/// only their digest): the headers and absent paths its request's dependency manifest recorded for it.
/// nullopt when the key has no such part, or the manifest is not here (an entry from a pack or another
/// cache) or no longer holds this result.
std::optional<cache::DependencySet> recorded_dependencies(const cache::Store& store,
                                                          const std::vector<cache::KeyPart>& parts,
                                                          const cache::Hash128& entry_key) {
  cache::CanonicalKey request_key;  // every part but the dependencies: the first level of the key
  bool two_level = false;
  for (const cache::KeyPart& part : parts) {
    if (part.name == "dependencies") two_level = true;
    else request_key.add(part.name, part.value);
  }
  if (!two_level || store.mode() == cache::StoreMode::memory_only) return std::nullopt;
  const cache::DependencyManifests manifests(store.config().root, /*read_only=*/true);
  return manifests.recorded(request_key.hash(), request_key.bytes(), entry_key);
}

void add_cache_commands(CLI::App& app, Commands& commands) {
  CLI::App* cache = app.add_subcommand("cache", "Inspect, verify, trim, export and import the kernel cache");
  cache->require_subcommand(1);

  CLI::App* path = cache->add_subcommand("path", "Print the cache root");
  commands.push_back({path, [] { return run_path(); }});

  auto ls = std::make_shared<LsArgs>();
  CLI::App* ls_app = cache->add_subcommand(
      "ls", "List entries (key, size, last use, lane, target, source, kernels), from their headers");
  ls_app->add_flag("--json", ls->json, "Print JSON");
  ls_app
      ->add_option("--sort", ls->sort,
                   "size (largest first), age (oldest created first), use (least recently used first)")
      ->check(CLI::IsMember({"size", "age", "use"}));
  ls_app->add_option("--target", ls->target, "Only entries for this target (gfx90a also matches gfx90a:xnack-)");
  ls_app->footer(
      "ls reads each entry's header (everything before the payload) and reports a damaged header; a damaged "
      "payload or checksum shows in `kiln cache verify`, which reads whole entries.");
  commands.push_back({ls_app, [ls] { return run_ls(*ls); }});

  auto show = std::make_shared<ShowArgs>();
  CLI::App* show_app = cache->add_subcommand("show", "An entry's metadata and every part of its canonical key");
  show_app->add_option("key", show->prefix, "The key or a unique prefix of it (hex, as `kiln cache ls` prints)")
      ->required();
  show_app->add_option("--dump", show->dump, "Write the payload (CUBIN, PTX or code object) to FILE ('-' = stdout)");
  show_app->add_flag("--json", show->json, "Print JSON");
  commands.push_back({show_app, [show] { return run_show(*show); }});

  auto stats = std::make_shared<StatsArgs>();
  CLI::App* stats_app =
      cache->add_subcommand("stats", "Entries and bytes per lane and target (from headers); lifetime hit ratio");
  stats_app->add_flag("--json", stats->json, "Print JSON");
  stats_app->add_flag("--zero", stats->zero, "Zero the lifetime counters");
  stats_app->footer("stats reads each entry's fixed header and target; `kiln cache verify` checks whole entries.");
  commands.push_back({stats_app, [stats] { return run_stats(*stats); }});

  auto verify = std::make_shared<VerifyArgs>();
  CLI::App* verify_app = cache->add_subcommand("verify", "Check every entry as the engine does (exit 1 if any is bad)");
  verify_app->add_flag("--fix", verify->fix, "Remove bad entries");
  verify_app->add_flag("--json", verify->json, "Print JSON");
  commands.push_back({verify_app, [verify] { return run_verify(*verify); }});

  auto prune = std::make_shared<PruneArgs>();
  CLI::App* prune_app = cache->add_subcommand(
      "prune", "Remove entries: least recently used first down to --max-size, and/or by --older-than, --target");
  prune_app->add_option("--max-size", prune->max_size, "Trim to this size, e.g. 500M, 2G (LRU)");
  prune_app->add_option("--older-than", prune->older_than, "Remove entries not used for AGE, e.g. 30d, 12h");
  prune_app->add_option("--target", prune->target, "Only entries for this target");
  prune_app->add_flag("--dry-run", prune->dry_run, "Print what would be removed");
  prune_app->add_flag("--json", prune->json, "Print JSON");
  commands.push_back({prune_app, [prune] { return run_prune(*prune); }});

  CLI::App* clear = cache->add_subcommand("clear", "Remove every entry");
  commands.push_back({clear, [] { return run_clear(); }});

  add_why_miss_command(*cache, commands);

  auto exp = std::make_shared<ExportArgs>();
  CLI::App* export_app = cache->add_subcommand("export", "Write entries into one pack file (.kpack)");
  export_app->add_option("file", exp->file, "The pack to write")->required();
  export_app->add_option("--target", exp->targets, "Only entries for this target (repeatable)");
  commands.push_back({export_app, [exp] { return run_export(*exp); }});

  auto imp = std::make_shared<ImportArgs>();
  CLI::App* import_app = cache->add_subcommand("import", "Verify every entry of a pack and add it to the cache");
  import_app->add_option("file", imp->file, "The pack to read")->required();
  commands.push_back({import_app, [imp] { return run_import(*imp); }});
}

}  // namespace kiln::cli
