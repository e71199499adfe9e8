#pragma once
// The `kiln cache` subcommands: each one's flags and what runs it. add_cache_commands
// (cache_commands.cpp) registers them; each run_* first gathers what it found into a plain struct, then
// renders that as text or JSON. Every entry is read with the engine's own parser (Store::scan_shard,
// Store::read_file, CanonicalKey::parse); nothing here knows the entry's byte layout.
//   path, ls       cache_ls.cpp
//   show           cache_show.cpp
//   stats          cache_stats.cpp
//   verify         cache_verify.cpp
//   prune, clear   cache_prune_clear.cpp
//   export, import cache_packs.cpp
//   why-miss       why_miss.cpp (registered by add_why_miss_command, cache_inspect.hpp)
#include <string>
#include <vector>

namespace kiln::cli {

int run_path();

struct LsArgs {
  bool json = false;
  bool pch = false;  ///< the precompiled headers instead of the entries
  std::string sort;
  std::string target;
};
int run_ls(const LsArgs& args);

struct ShowArgs {
  std::string prefix;
  std::string dump;
  bool json = false;
};
int run_show(const ShowArgs& args);

struct StatsArgs {
  bool json = false;
  bool zero = false;
};
int run_stats(const StatsArgs& args);

struct VerifyArgs {
  bool fix = false;
  bool json = false;
};
int run_verify(const VerifyArgs& args);

struct PruneArgs {
  std::string max_size;
  std::string older_than;
  std::string target;
  bool dry_run = false;
  bool json = false;
  bool pch = false;  ///< every precompiled header and its record, nothing else
};
int run_prune(const PruneArgs& args);
int run_clear();

struct ExportArgs {
  std::string file;
  std::vector<std::string> targets;
};
int run_export(const ExportArgs& args);

struct ImportArgs {
  std::string file;
};
int run_import(const ImportArgs& args);

}  // namespace kiln::cli
