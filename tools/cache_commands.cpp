// kiln cache ...: registers the subcommands (cache_commands.hpp says which file runs each) and their flags.
#include "cache_commands.hpp"

#include <memory>

#include "cache_inspect.hpp"
#include "cli.hpp"

namespace kiln::cli {

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
  ls_app->add_flag("--pch", ls->pch,
                   "List the precompiled headers instead (key, size, last use, whether it pays here, what it was made for)");
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
  prune_app->add_flag("--pch", prune->pch, "Remove every precompiled header and its record (what was measured), nothing else");
  prune_app->add_flag("--dry-run", prune->dry_run, "Print what would be removed");
  prune_app->footer("--max-size and --older-than take precompiled headers with entries, least recently used first, as "
                    "the engine's own trim does.");
  prune_app->add_flag("--json", prune->json, "Print JSON");
  commands.push_back({prune_app, [prune] { return run_prune(*prune); }});

  CLI::App* clear = cache->add_subcommand("clear", "Remove every entry, dependency manifest and precompiled header");
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
