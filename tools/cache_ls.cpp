// kiln cache path, kiln cache ls: where the cache is, and one row per entry from its header.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "cache_commands.hpp"
#include "cache_pch.hpp"
#include "cli.hpp"
#include "formatting.hpp"
#include "json_output.hpp"
#include "kiln/cache/blob.hpp"
#include "source_naming.hpp"
#include "store_scan.hpp"

namespace kiln::cli {
namespace {

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

/// What `ls` found: every shard directory's rows, each shard's in key order. Unlike the other
/// subcommands, a row's text is rendered while gathering, on the thread that read the entry, so the
/// formatting of many rows is spread over the scanning threads; what is left to render is the order,
/// the column heads and the summary.
struct Listing {
  std::vector<LsShard> shards;
  std::size_t problems = 0;
  std::size_t not_entries = 0;
};

// ---- one row ------------------------------------------------------------------------------------------

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

std::string names_text(const cache::EntryHeaderView& header) {
  // A caller's bytes: no name expressions; a `kernel` label names what they are (a Triton kernel's group).
  if (header.payload_kind == PayloadKind::blob) return std::string(cache::blob_label(header, "kernel").value_or(""));
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
  if (!parts) return "?";
  if (header.payload_kind == PayloadKind::blob) {
    // "<namespace> <file label>" ("triton __grp__add_kernel.json"), else "namespace <namespace>".
    const auto file = cache::blob_label(header, "file");
    const auto name_space = cache::blob_namespace(*parts);
    if (file && name_space) return fmt::format("{} {}", *name_space, *file);
  }
  return describe_source(*parts);
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
  const bool blob = h.payload_kind == PayloadKind::blob;
  fmt::format_to(std::back_inserter(out), ",\"vendor\":\"{}\",\"payload_kind\":\"{}\",\"target\":", to_string(h.vendor),
                 to_string(h.payload_kind));
  append_json_string(out, cache::labeled_target(h));  // a blob's: its `target` label
  out += ",\"compiler\":";
  append_json_string(out, h.compiler);
  fmt::format_to(std::back_inserter(out), ",\"created_unix\":{},\"source\":", h.created_unix);
  append_json_string(out, source_text(h));
  out += ",\"names\":[";
  bool first = true;
  if (!blob) {
    h.for_each_name([&](std::string_view expression, std::string_view lowered) {
      out += first ? "{\"expression\":" : ",{\"expression\":";
      first = false;
      append_json_string(out, expression);
      out += ",\"lowered\":";
      append_json_string(out, lowered);
      out += '}';
    });
  }
  out += "],\"labels\":{";  // a blob's names list holds its labels (kiln/cache/blob.hpp)
  first = true;
  if (blob) {
    h.for_each_name([&](std::string_view name, std::string_view value) {
      if (!first) out += ',';
      first = false;
      append_json_string(out, name);
      out += ':';
      append_json_string(out, value);
    });
  }
  out += '}';
  fmt::format_to(std::back_inserter(out), ",\"payload_bytes\":{},\"aux_bytes\":{}}}", h.payload_bytes, h.aux_bytes);
}

// KIND is wide enough for the longest kind, amd_code_object: the column says what every other interface says.
constexpr const char* kLsColumns = "{:<16}  {:>10}  {:>8}  {:<5} {:<15} {:<24} {:<20} {}\n";

void append_entry_line(std::string& out, const cache::ScannedEntry& e, const std::string& problem) {
  const std::string key = e.file_hash.hex().substr(0, 16);
  if (!problem.empty()) {
    fmt::format_to(std::back_inserter(out), "{:<16}  {:>10}  {:>8}  {}: {}\n", key, format_bytes(e.size),
                   format_age(e.mtime), state_label(entry_state(e)), one_line(problem));
    return;
  }
  const cache::EntryHeaderView& h = *e.header;
  fmt::format_to(std::back_inserter(out), fmt::runtime(kLsColumns), key, format_bytes(e.size), format_age(e.mtime),
                 to_string(h.vendor), to_string(h.payload_kind), cache::labeled_target(h), source_text(h),
                 names_text(h));
}

/// Adds a row for `e` to its shard, its text rendered now (text or JSON).
void add_row(LsShard& shard, const cache::ScannedEntry& e, const std::string& problem, bool json) {
  LsRow row;
  row.key = e.file_hash;
  row.size = e.size;
  row.mtime = e.mtime;
  row.created_unix = e.header != nullptr ? e.header->created_unix : 0;
  row.offset = shard.text.size();
  if (json) {
    append_entry_json(shard.text, e, problem);
  } else {
    append_entry_line(shard.text, e, problem);
  }
  row.length = shard.text.size() - row.offset;
  shard.rows.push_back(row);
  if (!problem.empty()) ++shard.problems;
}

// ---- gathering ----------------------------------------------------------------------------------------

Listing gather_listing(const cache::Store& store, const LsArgs& args) {
  // Headers only (no payload, no checksum: `kiln cache verify` checks whole entries), one shard directory
  // per task; each entry's output is formatted on the scanning thread, into its shard's buffer.
  Listing listing;
  listing.shards.resize(cache::Store::kShardCount);
  std::vector<LsShard>& shards = listing.shards;
  scan_store(
      store, cache::ScanDepth::header, true,
      [&](unsigned index, const cache::ScannedEntry& e) {
        const std::string problem = entry_problem(e);
        const bool readable = e.header != nullptr && entry_state(e) != EntryState::damaged;
        if (!args.target.empty() && (!readable || !target_matches(cache::labeled_target(*e.header), args.target))) {
          return;
        }
        // A refused entry's header is fine: it is listed as a problem row all the same.
        add_row(shards[index], e, problem, args.json);
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
        add_row(shards[index], e, problem, args.json);
      });
  for (LsShard& shard : shards) {
    // Shard directories hold keys by their first byte: key order is shard order, then key order within.
    std::sort(shard.rows.begin(), shard.rows.end(),
              [](const LsRow& a, const LsRow& b) { return key_order(a.key, b.key); });
    listing.problems += shard.problems;
    listing.not_entries += shard.not_entries;
  }
  return listing;
}

struct RowRef {
  const LsRow* row;
  const LsShard* shard;
};

/// Every row of the listing in the order `sort` asks for (key order when empty).
std::vector<RowRef> listing_order(const Listing& listing, const std::string& sort) {
  std::vector<RowRef> order;
  std::size_t count = 0;
  for (const LsShard& shard : listing.shards) count += shard.rows.size();
  order.reserve(count);
  for (const LsShard& shard : listing.shards) {
    for (const LsRow& row : shard.rows) order.push_back({&row, &shard});
  }
  const auto sort_by = [&](auto less) {
    std::stable_sort(order.begin(), order.end(),
                     [&](const RowRef& a, const RowRef& b) { return less(*a.row, *b.row); });
  };
  if (sort == "size") {
    sort_by([](const LsRow& a, const LsRow& b) { return a.size > b.size; });
  } else if (sort == "age") {
    sort_by([](const LsRow& a, const LsRow& b) { return a.created_unix < b.created_unix; });
  } else if (sort == "use") {
    sort_by([](const LsRow& a, const LsRow& b) { return a.mtime < b.mtime; });
  }
  return order;
}

// ---- rendering ----------------------------------------------------------------------------------------

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

std::string listing_summary(const cache::Store& store, const Listing& listing, std::size_t rows, std::uint64_t bytes) {
  std::string summary = fmt::format("{}, {}", counted(rows, "entry", "entries"), format_bytes(bytes));
  if (listing.problems != 0) summary += fmt::format("; {} not usable (kiln cache verify says more)", listing.problems);
  if (listing.not_entries != 0) {
    summary += fmt::format("; {} in the entry directories (kiln cache verify lists them)",
                           counted(listing.not_entries, "other file", "other files"));
  }
  if (store.refused()) summary += fmt::format("; the engine uses none of them: {}", store.mode_reason());
  return summary;
}

/// Prints the rows in `order`: a JSON array, or a table with column heads and a summary line.
void render_listing(const cache::Store& store, const Listing& listing, const std::vector<RowRef>& order, bool json) {
  Output out;
  std::uint64_t bytes = 0;
  if (json) {
    out.append("[");
  } else {
    out.append(
        fmt::format(fmt::runtime(kLsColumns), "KEY", "SIZE", "USED", "LANE", "KIND", "TARGET", "SOURCE", "KERNELS"));
  }
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (json && i > 0) out.append(",");
    out.append(std::string_view(order[i].shard->text).substr(order[i].row->offset, order[i].row->length));
    bytes += order[i].row->size;
  }
  if (json) {
    out.append("]\n");
  } else {
    out.append(listing_summary(store, listing, order.size(), bytes) + "\n");
  }
  out.flush();
  if (json && listing.not_entries != 0) {
    std::cerr << fmt::format("kiln: {} other files in the entry directories (kiln cache verify lists them)\n",
                             listing.not_entries);
  }
}

}  // namespace

int run_path() {
  const auto store = open_store();
  std::cout << store->config().root.string() << '\n';
  return kExitOk;
}

int run_ls(const LsArgs& args) {
  const auto store = open_store();
  if (args.pch) return run_ls_pch(*store, args.json);
  const Listing listing = gather_listing(*store, args);
  render_listing(*store, listing, listing_order(listing, args.sort), args.json);
  // Exit 1 when something is wrong (docs/cli.md: a bad entry is "found"), 0 for a clean listing.
  return listing.problems + listing.not_entries != 0 || store->refused() ? kExitFound : kExitOk;
}

}  // namespace kiln::cli
