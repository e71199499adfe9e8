#pragma once
// JSON on stdout: whole documents (--json of most subcommands), and the fast path for the many small
// records of `kiln cache ls --json`.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln::cli {

using nlohmann::json;

/// Appends `text` as a JSON string literal (quoted, escaped; invalid UTF-8 replaced by U+FFFD).
/// The fast path for output of many small records, where building a json tree per record costs more
/// than reading the entry.
void append_json_string(std::string& out, std::string_view text);

/// Writes a JSON document to stdout (pretty when stdout is a terminal).
void print_json(const json& document);

}  // namespace kiln::cli
