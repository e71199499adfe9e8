// kiln cache show: one entry's metadata, every part of its canonical key, the headers its request read
// (requests with include folders), and its payload on request (--dump).
#include <algorithm>
#include <cctype>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "cache_commands.hpp"
#include "cache_inspect.hpp"
#include "cli.hpp"
#include "formatting.hpp"
#include "json_output.hpp"
#include "kiln/base/hash.hpp"
#include "kiln/cache/blob.hpp"
#include "kiln/cache/dependencies.hpp"
#include "kiln/engine.hpp"
#include "source_naming.hpp"
#include "store_scan.hpp"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

/// What `show` found about the entry a key prefix names.
struct ShowReport {
  cache::EntryFile file;
  std::string refusal;                ///< why the engine does not use the entry whatever its bytes; empty if it does
  std::optional<cache::Entry> entry;  ///< nullopt when the file did not parse (`error` says why)
  std::string error;
  bool io_error = false;                             ///< `error` is a read error (the entry may be fine), not damage
  std::optional<std::vector<cache::KeyPart>> parts;  ///< nullopt when the key does not follow the key grammar
  /// A request with include folders: its key holds the digest of every header it read; the list (path and
  /// digest) is in the request's dependency manifest (nullopt when this cache does not hold it).
  std::optional<cache::DependencySummary> summary;
  std::optional<cache::DependencySet> dependencies;
};

// ---- gathering ----------------------------------------------------------------------------------------

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

/// The entry a key prefix names, read whole, and whether the engine would use it.
ShowReport read_shown_entry(const cache::Store& store, const std::string& prefix) {
  ShowReport report;
  report.file = find_by_prefix(store.list(), prefix, store.config().root);
  // A refused entry is shown (it is there to inspect), and said to be refused: something found (exit 1).
  report.refusal = entry_refusal(store, report.file.file_hash, report.file.path);
  auto parsed = store.read_file(report.file.path);
  if (auto* error = std::get_if<cache::ContentError>(&parsed)) {
    report.error = error->reason;
    report.io_error = error->reason.starts_with("cannot open") || error->reason.starts_with("cannot stat") ||
                      error->reason.starts_with("I/O error");
    return report;
  }
  report.entry = std::get<cache::Entry>(std::move(parsed));
  report.parts = cache::CanonicalKey::parse(report.entry->canonical_key);
  return report;
}

void add_recorded_dependencies(const cache::Store& store, ShowReport& report) {
  if (!report.parts) return;
  if (const std::string* text = find_part(*report.parts, "dependencies")) {
    report.summary = cache::parse_canonical_dependencies(*text);
    report.dependencies = recorded_dependencies(store, *report.parts, report.entry->key_hash);
  }
}

/// --dump: writes the payload to stdout ('-') or a file. True when it went to stdout (nothing else is
/// printed then).
bool dump_payload(const ShowReport& report, const std::string& dump) {
  const cache::Entry& entry = *report.entry;
  if (dump == "-") {
    std::cout.write(reinterpret_cast<const char*>(entry.payload.data()),
                    static_cast<std::streamsize>(entry.payload.size()));
    std::cout.flush();
    if (!report.refusal.empty()) {
      std::cerr << fmt::format("kiln: warning: entry {} is {}\n", report.file.file_hash.hex(), report.refusal);
    }
    return true;
  }
  std::ofstream out(dump, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(entry.payload.data()), static_cast<std::streamsize>(entry.payload.size()));
  out.close();
  if (!out) throw std::runtime_error(fmt::format("--dump {}: cannot write the payload", dump));
  std::cerr << fmt::format("wrote the {} payload ({}) to {}\n", to_string(entry.payload_kind),
                           format_bytes(entry.payload.size()), dump);
  return false;
}

// ---- rendering ----------------------------------------------------------------------------------------

/// An entry that did not parse: a bad entry is something found (exit 1), not bad input.
void render_damaged(const ShowReport& report, bool json) {
  if (json) {
    print_json({{"key", report.file.file_hash.hex()},
                {"path", report.file.path.string()},
                {"valid", false},
                {"state", report.io_error ? "unreadable" : "bad"},
                {"error", report.error}});
  } else {
    std::cout << fmt::format("entry {} ({}) {}: {}\n", report.file.file_hash.hex(), report.file.path.string(),
                             report.io_error ? "cannot be read" : "is damaged", one_line(report.error));
  }
}

json names_json(const std::vector<cache::LoweredName>& names) {
  json out = json::array();
  for (const cache::LoweredName& name : names)
    out.push_back({{"expression", name.expression}, {"lowered", name.lowered}});
  return out;
}

json headers_json(const std::optional<cache::DependencySet>& dependencies) {
  json out = json::array();
  if (dependencies) {
    for (const cache::HeaderRecord& h : dependencies->headers)
      out.push_back({{"path", h.path}, {"digest", h.digest.hex()}});
  }
  return out;
}

json key_parts_json(const std::optional<std::vector<cache::KeyPart>>& parts) {
  json key_parts = json::array();
  if (parts) {
    for (const cache::KeyPart& part : *parts) {
      json item = {{"name", part.name}, {"size", part.value.size()}, {"hash", cache::hash128(part.value).hex()}};
      if (part.value.size() <= 4096) item["value"] = part.value;
      key_parts.push_back(std::move(item));
    }
  }
  return key_parts;
}

/// The namespace of an entry under a caller's key; null for a compiled binary.
json blob_namespace_json(const ShowReport& report) {
  if (report.entry->payload_kind != PayloadKind::blob || !report.parts) return nullptr;
  const auto name_space = cache::blob_namespace(*report.parts);
  return name_space ? json(*name_space) : json(nullptr);
}

/// A blob's labels as an object (kiln/cache/blob.hpp); {} for a compiled binary.
json labels_json(const cache::Entry& entry) {
  json labels = json::object();
  for (const cache::BlobLabel& label : cache::blob_labels(entry)) labels[label.name] = label.value;
  return labels;
}

json show_json(const ShowReport& report) {
  const cache::Entry& entry = *report.entry;
  const bool blob = entry.payload_kind == PayloadKind::blob;
  const auto& summary = report.summary;
  const auto& dependencies = report.dependencies;
  return {{"key", entry.key_hash.hex()},
          {"path", report.file.path.string()},
          {"file_size", report.file.size},
          {"last_use_unix", to_unix(report.file.mtime)},
          {"vendor", std::string(to_string(entry.vendor))},
          {"payload_kind", std::string(to_string(entry.payload_kind))},
          {"payload_bytes", entry.payload.size()},
          {"aux_bytes", entry.aux.size()},
          {"target", entry.target},
          {"compiler", entry.compiler},
          {"created_unix", entry.created_unix},
          {"source", report.parts ? describe_source(*report.parts) : "?"},
          {"namespace", blob_namespace_json(report)},
          {"labels", labels_json(entry)},
          {"names", blob ? json::array() : names_json(entry.names)},
          {"canonical_key_bytes", entry.canonical_key.size()},
          {"key_parts", key_parts_json(report.parts)},
          {"headers", headers_json(dependencies)},
          {"absent_paths", dependencies ? json(dependencies->absent) : json::array()},
          {"headers_count", summary ? json(summary->headers) : json(nullptr)},
          {"absent_count", summary ? json(summary->absent) : json(nullptr)},
          {"headers_listed", dependencies.has_value()},
          {"refused", report.refusal}};
}

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

/// The "key" to "kernels" lines of `show`.
std::string metadata_text(const ShowReport& report) {
  const cache::Entry& entry = *report.entry;
  std::string text;
  text += fmt::format("key       {}\n", entry.key_hash.hex());
  if (!report.refusal.empty())
    text += fmt::format("REFUSED   {}: the engine does not use this entry\n", report.refusal);
  text += fmt::format("file      {} ({}, last used {} ago)\n", report.file.path.string(),
                      format_bytes(report.file.size), format_age(report.file.mtime));
  text += fmt::format("vendor    {}\n", to_string(entry.vendor));
  text += fmt::format("payload   {} {}", to_string(entry.payload_kind), format_bytes(entry.payload.size()));
  if (!entry.aux.empty()) text += fmt::format(" (+ PTX {})", format_bytes(entry.aux.size()));
  text += '\n';
  text += fmt::format("target    {}\n", entry.target);
  text += fmt::format("compiler  {}\n", entry.compiler);
  text += fmt::format("created   {}\n", format_time(entry.created_unix));
  if (entry.payload_kind == PayloadKind::blob) {
    // Bytes a caller stored under its own key: what names them is the namespace (and the key, below).
    const auto name_space = report.parts ? cache::blob_namespace(*report.parts) : std::nullopt;
    text += fmt::format("namespace {}\n", name_space ? *name_space : "?");
    const std::vector<cache::BlobLabel> labels = cache::blob_labels(entry);
    for (std::size_t i = 0; i < labels.size(); ++i) {
      text +=
          fmt::format("{}{} = {}\n", i == 0 ? "labels    " : "          ", labels[i].name, one_line(labels[i].value));
    }
    return text;
  }
  text += fmt::format("source    {}\n", report.parts ? describe_source(*report.parts) : "?");
  if (entry.names.empty()) text += "kernels   (no name expressions: extern \"C\" kernels by their own names)\n";
  for (std::size_t i = 0; i < entry.names.size(); ++i) {
    text += fmt::format("{}{} -> {}\n", i == 0 ? "kernels   " : "          ", entry.names[i].expression,
                        entry.names[i].lowered);
  }
  return text;
}

/// The "headers" lines (requests with include folders only), and the canonical key part by part.
std::string key_text(const ShowReport& report) {
  std::string text;
  if (const auto& summary = report.summary) {
    text += fmt::format("headers   {} read from include folders ({} probed and found absent)", summary->headers,
                        counted(summary->absent, "path", "paths"));
    if (report.dependencies) {
      text += ":\n";
      for (const cache::HeaderRecord& header : report.dependencies->headers) {
        text += fmt::format("          {}  {}\n", header.digest.hex(), header.path);
      }
    } else {
      text += "; the list is in the request's dependency manifest, which this cache does not hold\n";
    }
  }
  const auto& parts = report.parts;
  if (!parts) {
    text += "canonical key: does not follow the key grammar\n";
    return text;
  }
  text +=
      fmt::format("canonical key ({} parts, {}):\n", parts->size(), format_bytes(report.entry->canonical_key.size()));
  std::size_t width = 0;
  for (const cache::KeyPart& part : *parts) width = std::max(width, part.name.size());
  for (const cache::KeyPart& part : *parts)
    text += fmt::format("  {:<{}}  {}\n", part.name, width, summarize_part(part.value));
  return text;
}

}  // namespace

int run_show(const ShowArgs& args) {
  const auto store = open_store();
  ShowReport report = read_shown_entry(*store, args.prefix);
  if (!report.entry) {
    render_damaged(report, args.json);
    return kExitFound;
  }
  const int found = report.refusal.empty() ? kExitOk : kExitFound;
  if (!args.dump.empty() && dump_payload(report, args.dump)) return found;
  add_recorded_dependencies(*store, report);
  if (args.json) {
    print_json(show_json(report));
  } else {
    std::cout << metadata_text(report) + key_text(report);
  }
  return found;
}

}  // namespace kiln::cli
