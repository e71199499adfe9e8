// The cache's precompiled headers for the CLI (cache_pch.hpp): counted for stats, listed for `ls --pch`,
// checked whole for verify, and handed to prune and clear as files.
#include "cache_pch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "cli.hpp"
#include "formatting.hpp"
#include "json_output.hpp"

namespace kiln::cli {

PchSummary summarize_pch(const cache::Store& store) {
  PchSummary s;
  for (const cache::PchListing& item : store.list_pch()) {
    if (item.record) {
      ++s.records;
      s.record_bytes += item.size;
      if (!item.parsed_record) {
        ++s.damaged;
        continue;
      }
      switch (item.parsed_record->verdict) {
        case cache::PchRecord::Verdict::learning: ++s.learning; break;
        case cache::PchRecord::Verdict::pays: ++s.pays; break;
        case cache::PchRecord::Verdict::does_not_pay: ++s.does_not_pay; break;
        case cache::PchRecord::Verdict::too_large: ++s.too_large; break;
      }
    } else {
      ++s.files;
      s.bytes += item.size;
      if (!item.problem.empty()) ++s.damaged;
    }
  }
  return s;
}

std::string pch_text(const cache::Store& store, const PchSummary& s) {
  std::string text = fmt::format("precompiled hdrs  {} ({} of a {} share of the limit; KILN_PCH_MAXSIZE)\n", s.files,
                                 format_bytes(s.bytes), format_bytes(store.config().pch_limit()));
  if (s.records > 0) {
    text += fmt::format("  header sets     {} measured: {} pay, {} do not, {} learning, {} too large\n", s.records,
                        s.pays, s.does_not_pay, s.learning, s.too_large);
  }
  if (s.damaged > 0) text += fmt::format("  damaged         {} (kiln cache verify --fix removes them)\n", s.damaged);
  return text;
}

json pch_json(const cache::Store& store, const PchSummary& s) {
  return {{"count", s.files},          {"bytes", s.bytes},     {"limit", store.config().pch_limit()},
          {"records", s.records},      {"record_bytes", s.record_bytes},
          {"pays", s.pays},            {"does_not_pay", s.does_not_pay},
          {"learning", s.learning},    {"too_large", s.too_large},
          {"damaged", s.damaged}};
}

int run_ls_pch(const cache::Store& store, bool as_json) {
  struct Row {
    const cache::PchListing* pch = nullptr;
    const cache::PchListing* record = nullptr;
  };
  const std::vector<cache::PchListing> items = store.list_pch();
  std::map<std::string, Row> rows;  // by key: the same order as the files
  for (const cache::PchListing& item : items) (item.record ? rows[item.key.hex()].record : rows[item.key.hex()].pch) = &item;
  json list = json::array();
  std::string text = fmt::format("{:<32}  {:>10}  {:>9}  {:<12}  {}\n", "KEY", "SIZE", "LAST USE", "VERDICT", "MADE FOR");
  for (const auto& [key, row] : rows) {
    const std::string verdict = row.record == nullptr          ? "-"
                                : row.record->parsed_record ? std::string(cache::to_string(row.record->parsed_record->verdict))
                                                            : "damaged";
    const std::string label = row.pch == nullptr ? "(none stored)"
                              : !row.pch->problem.empty() ? "damaged: " + row.pch->problem
                                                          : row.pch->label.value_or("");
    if (as_json) {
      json item = {{"key", key}, {"verdict", verdict}};
      if (row.pch != nullptr) {
        item["size"] = row.pch->size;
        item["last_use_unix"] = std::chrono::duration_cast<std::chrono::seconds>(row.pch->used().time_since_epoch()).count();
        item["made_unix"] = row.pch->made_unix;
        item["label"] = label;
      }
      if (row.record != nullptr && row.record->parsed_record) {
        const cache::PchRecord& r = *row.record->parsed_record;
        item["without_ms"] = r.without_ms;
        item["with_ms"] = r.with_ms;
        item["make_ms"] = r.make_ms;
        item["why"] = r.why;
      }
      list.push_back(std::move(item));
      continue;
    }
    text += fmt::format("{:<32}  {:>10}  {:>9}  {:<12}  {}\n", key, row.pch ? format_bytes(row.pch->size) : "-",
                        row.pch ? format_age(row.pch->used()) : "-", verdict, label);
  }
  if (as_json) {
    print_json({{"root", store.config().root.string()}, {"pch", std::move(list)}});
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return kExitOk;
}

std::vector<PchFinding> verify_pch(cache::Store& store, bool fix) {
  std::vector<PchFinding> out;
  for (const cache::PchListing& item : store.list_pch()) {
    std::string problem = item.record ? (item.parsed_record ? std::string() : std::string("not a PCH record"))
                                      : store.check_pch_file(item.path);
    if (problem.empty()) continue;
    PchFinding finding{item.path.string(), std::move(problem), false};
    const bool io_error = finding.problem.starts_with("I/O error") || finding.problem.starts_with("cannot open");
    std::error_code ignored;
    if (fix && !io_error) finding.removed = std::filesystem::remove(item.path, ignored);
    out.push_back(std::move(finding));
  }
  if (fix && !out.empty()) (void)store.remeasure_size();
  return out;
}

std::vector<cache::EntryFile> pch_files(const cache::Store& store) {
  std::vector<cache::EntryFile> out;
  for (const cache::PchListing& item : store.list_pch()) out.push_back({item.path, item.key, item.size, item.mtime, item.record_mtime});
  return out;
}

}  // namespace kiln::cli
