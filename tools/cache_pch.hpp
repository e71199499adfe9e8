#pragma once
// The precompiled headers kept in the cache (kiln/cache/pch_store.hpp) as the `kiln cache` subcommands see them:
// stats' counts, `ls --pch`, verify's checks, and what prune and clear remove (cache_pch.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/cache/store.hpp"

namespace kiln::cli {

/// What <root>/pch holds.
struct PchSummary {
  std::size_t files = 0;    ///< .pch files
  std::uint64_t bytes = 0;  ///< their bytes
  std::size_t records = 0;  ///< .pchv files
  std::uint64_t record_bytes = 0;
  std::size_t pays = 0, does_not_pay = 0, learning = 0, too_large = 0;  ///< the records' verdicts
  std::size_t damaged = 0;  ///< a trailer or record that does not parse (verify checks the bytes)
};
[[nodiscard]] PchSummary summarize_pch(const cache::Store& store);
/// stats' lines and JSON for them.
[[nodiscard]] std::string pch_text(const cache::Store& store, const PchSummary& summary);
[[nodiscard]] nlohmann::json pch_json(const cache::Store& store, const PchSummary& summary);

/// `kiln cache ls --pch`: one row per key (its .pch and its record together).
int run_ls_pch(const cache::Store& store, bool json);

/// A .pch file that verify found bad.
struct PchFinding {
  std::string path;
  std::string problem;
  bool removed = false;
};
/// Checks every .pch file whole (trailer, key, checksum: what a process checks before its first use) and, with
/// `fix`, removes the bad ones (an I/O error removes nothing). Records are checked by parsing.
[[nodiscard]] std::vector<PchFinding> verify_pch(cache::Store& store, bool fix);

/// Every file of <root>/pch as the prune and clear commands take them (.pch files and records).
[[nodiscard]] std::vector<cache::EntryFile> pch_files(const cache::Store& store);

}  // namespace kiln::cli
