// kiln cache why-miss: would this request hit? If not, the nearest entry and exactly which key parts (and,
// with include folders, which headers) differ, what the request's dependency manifest says, and whether its
// compile would find a precompiled header.
#include <algorithm>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "cache_inspect.hpp"
#include "cli.hpp"
#include "formatting.hpp"
#include "json_output.hpp"
#include "kiln/includes/dep_manifest.hpp"
#include "kiln/cache/dependencies.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "parallel.hpp"
#include "requests.hpp"
#include "source_naming.hpp"
#include "store_scan.hpp"
#include "text_file.hpp"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

struct WhyMissArgs {
  std::string source;
  std::string builtin;
  std::vector<std::string> headers;
  std::vector<std::string> kernels;
  std::vector<std::string> options;
  std::vector<std::string> include_dirs;
  bool toolkit_includes = false;
  std::string target;
  bool one_program = false;
  bool json = false;
};

struct Nearest {
  std::tuple<int, std::size_t, std::int64_t> rank{4, 0, 0};  // category, differences, -mtime
  cache::EntryFile file;
  std::string target;
  std::string source;
  std::vector<cache::KeyDifference> differences;
};

/// The dependency manifest's side of a miss: each result recorded for the request and what no longer
/// matches it (the header that changed, appeared or vanished).
std::string describe_explanation(const cache::ManifestExplanation& explanation) {
  switch (explanation.outcome) {
    case cache::ManifestOutcome::no_manifest:
      return "dependency manifest: none (this request has not been compiled with these include folders here)\n";
    case cache::ManifestOutcome::disabled:
      return "dependency manifest: none (the cache is memory-only)\n";
    case cache::ManifestOutcome::corrupt:
    case cache::ManifestOutcome::corrupt_removed:
      return fmt::format("dependency manifest: damaged: {}; the engine replaces it\n", one_line(explanation.detail));
    case cache::ManifestOutcome::io_error:
      return fmt::format("dependency manifest: cannot be read: {}\n", one_line(explanation.detail));
    case cache::ManifestOutcome::hit:
    case cache::ManifestOutcome::no_match:
      break;
  }
  std::string text = fmt::format("dependency manifest: {} recorded result(s), newest first:\n", explanation.results.size());
  for (std::size_t i = 0; i < explanation.results.size(); ++i) {
    const cache::ResultCheck& r = explanation.results[i];
    if (r.change == cache::DependencyChange::none) {
      text += fmt::format("  {}. {}: every header still matches (its entry is gone from the cache)\n", i + 1,
                          r.result_key.hex());
    } else {
      text += fmt::format("  {}. {}: {} {}{}\n", i + 1, r.result_key.hex(), to_string(r.change), r.path,
                          r.detail.empty() ? std::string() : fmt::format(": {}", one_line(r.detail)));
    }
  }
  return text;
}

int run_why_miss(const WhyMissArgs& args) {
  if (args.source.empty() == args.builtin.empty())
    throw UsageError("why-miss needs exactly one of --source FILE or --builtin NAME");
  if (args.kernels.empty()) throw UsageError("why-miss needs --kernel NAME");
  std::vector<Header> headers;
  for (const std::string& spec : args.headers) {
    const std::size_t equals = spec.find('=');
    const fs::path path = equals == std::string::npos ? spec : spec.substr(equals + 1);
    headers.push_back({equals == std::string::npos ? path.filename().string() : spec.substr(0, equals),
                       read_text_file(path, "--header")});
  }
  std::optional<Source> source;
  try {
    source = args.builtin.empty() ? Source::from_text(fs::path(args.source).filename().string(),
                                                      read_text_file(args.source, "--source"), headers)
                                  : Source::builtin(args.builtin);
  } catch (const ConfigError& error) {
    throw UsageError(error.what());
  }
  Options options;
  try {
    options = Options(with_include_options(args.options, args.include_dirs, args.toolkit_includes));
  } catch (const Error& error) {
    throw UsageError(fmt::format("--option: {}", error.what()));
  }
  const auto sets = name_sets(args.kernels, args.one_program);
  if (sets.size() != 1) {
    throw UsageError(
        fmt::format("these kernels make {} separate requests; ask about one at a time (or use "
                    "--one-program)",
                    sets.size()));
  }
  const std::vector<std::string>& names = sets.front();

  const EngineConfig config = EngineConfig::from_environment();
  Engine engine(config);
  cache::DependencySet current;  // with include folders: what the key names now
  const auto [hash, canonical] = engine.describe_key(*source, options, names, args.target, &current);
  // The local store as the engine opened it (the same configuration; its warnings were the engine's).
  const std::unique_ptr<cache::Store> opened_store = open_store(/*quiet=*/true);
  const cache::Store& store = *opened_store;
  const std::string request_label =
      fmt::format("{} [{}] {}{}", source->name(), fmt::join(args.kernels, ", "), args.target,
                  args.options.empty() ? std::string() : fmt::format(" {{{}}}", fmt::join(args.options, " ")));

  // 1. The local store, exactly where the engine looks.
  std::string where;
  std::string damaged;
  const fs::path path = store.entry_path(hash);
  std::error_code ec;
  if (store.mode() == cache::StoreMode::memory_only) {
    damaged = fmt::format("the engine does not read the local cache, which is memory-only: {}", store.mode_reason());
  } else if (fs::exists(path, ec)) {
    const std::string refusal = entry_refusal(store, hash, path);
    auto parsed = store.read_file(path);
    if (auto* entry = std::get_if<cache::Entry>(&parsed)) {
      if (!refusal.empty()) {
        damaged = fmt::format("the entry file is {}: the engine does not use it, and a compile replaces it", refusal);
      } else if (entry->canonical_key == canonical) {
        where = "local cache";
      } else {
        damaged = "the entry file holds another request (a hash collision: the engine treats it as a miss)";
      }
    } else {
      damaged = fmt::format("the entry file is damaged, so the engine deletes it and recompiles: {}",
                            std::get<cache::ContentError>(parsed).reason);
    }
  }
  // 2. The tiers below it (packs, remote), in the engine's order.
  std::vector<std::string> tier_errors;
  if (where.empty()) where = engine.tier_holding(hash, canonical, tier_errors);
  if (!where.empty()) {
    if (args.json) {
      print_json({{"request", request_label}, {"key", hash.hex()}, {"hit", true}, {"where", where}});
    } else {
      std::cout << fmt::format("hit: {} is in the {} (key {})\n", request_label, where, hash.hex());
    }
    return kExitOk;
  }

  // 3. A miss: the nearest entry, preferring the same source and kernels, then the fewest differences.
  const auto request_parts = cache::CanonicalKey::parse(canonical);
  if (!request_parts) throw std::runtime_error("the engine built a key that does not follow the key grammar");
  const std::string* request_source = find_part(*request_parts, "source");
  const std::string* request_names = find_part(*request_parts, "names");
  const std::vector<cache::EntryFile> files = store.list();
  std::mutex mutex;
  std::optional<Nearest> nearest;
  parallel_for(files.size(), 0, [&](std::size_t i) {
    auto parsed = store.read_file(files[i].path);
    auto* entry = std::get_if<cache::Entry>(&parsed);
    if (entry == nullptr) return;
    const auto parts = cache::CanonicalKey::parse(entry->canonical_key);
    if (!parts) return;
    const std::string* entry_source = find_part(*parts, "source");
    const std::string* entry_names = find_part(*parts, "names");
    const bool same_source = request_source && entry_source && *request_source == *entry_source;
    const bool same_names = (request_names == nullptr && entry_names == nullptr) ||
                            (request_names && entry_names && *request_names == *entry_names);
    const int category = same_source && same_names ? 0 : same_names ? 1 : same_source ? 2 : 3;
    std::vector<cache::KeyDifference> differences = cache::diff_keys(*parts, *request_parts);
    const std::tuple<int, std::size_t, std::int64_t> rank{category, differences.size(), -to_unix(files[i].mtime)};
    const std::lock_guard lock(mutex);
    if (!nearest || rank < nearest->rank) {
      nearest = Nearest{rank, files[i], entry->target, describe_source(*parts), std::move(differences)};
    }
  });

  // The headers' key part holds a digest: say header by header what differs from the nearest entry's,
  // as its manifest recorded them.
  if (nearest && find_part(*request_parts, "dependencies") != nullptr) {
    auto& differences = nearest->differences;
    const auto at = std::find_if(differences.begin(), differences.end(),
                                 [](const cache::KeyDifference& d) { return d.name == "dependencies"; });
    if (at != differences.end()) {
      auto parsed = store.read_file(nearest->file.path);
      const auto* entry = std::get_if<cache::Entry>(&parsed);
      const auto parts = entry ? cache::CanonicalKey::parse(entry->canonical_key) : std::nullopt;
      const std::optional<cache::DependencySet> recorded =
          parts ? recorded_dependencies(store, *parts, entry->key_hash) : std::nullopt;
      if (recorded) {
        std::vector<cache::KeyDifference> lines;
        for (std::string& line : cache::describe_dependency_changes(*recorded, current)) {
          lines.push_back({"dependencies", std::move(line)});
        }
        const auto index = at - differences.begin();
        differences.erase(at);
        differences.insert(differences.begin() + index, lines.begin(), lines.end());
      }
    }
  }

  // 4. With include folders: the request's dependency manifest, each recorded result against the files now.
  std::optional<cache::ManifestExplanation> explanation;
  if (find_part(*request_parts, "include-folders") != nullptr) {
    const cache::CanonicalKey request_key = cache::request_key_of(*request_parts);
    const cache::DependencyManifests manifests(store.mode() == cache::StoreMode::memory_only ? fs::path()
                                                                                            : store.config().root,
                                               /*read_only=*/true);
    explanation = manifests.explain(request_key.hash(), request_key.bytes());
  }

  // 5. What the compile this miss leads to would do with a precompiled header.
  std::string pch;
  try {
    pch = engine.pch_outlook(*source, options, names, args.target);
  } catch (const std::exception& error) {
    pch = fmt::format("unknown: {}", one_line(error.what()));
  }

  if (args.json) {
    json out = {{"request", request_label},
                {"key", hash.hex()},
                {"hit", false},
                {"precompiled_header", pch},
                {"damaged", damaged},
                {"tier_errors", tier_errors}};
    if (explanation) {
      json results = json::array();
      for (const cache::ResultCheck& r : explanation->results) {
        results.push_back({{"key", r.result_key.hex()},
                           {"change", std::string(to_string(r.change))},
                           {"path", r.path},
                           {"detail", r.detail}});
      }
      out["manifest"] = {{"outcome", std::string(to_string(explanation->outcome))},
                         {"detail", explanation->detail},
                         {"results", std::move(results)}};
    }
    if (nearest) {
      json differences = json::array();
      for (const cache::KeyDifference& d : nearest->differences) {
        differences.push_back({{"part", d.name}, {"description", d.description}});
      }
      out["nearest"] = {{"key", nearest->file.file_hash.hex()},
                        {"target", nearest->target},
                        {"source", nearest->source},
                        {"same_source_and_kernels", std::get<0>(nearest->rank) == 0},
                        {"differences", std::move(differences)}};
    }
    print_json(out);
    return kExitFound;
  }
  std::string text =
      fmt::format("miss: {} (key {}) is not in {}", request_label, hash.hex(), store.config().root.string());
  text += config.packs.empty() ? "\n" : fmt::format(" nor in {} pack(s)\n", config.packs.size());
  if (!damaged.empty()) text += fmt::format("  {}\n", damaged);
  for (const std::string& error : tier_errors) text += fmt::format("  tier unusable: {}\n", one_line(error));
  if (explanation) text += describe_explanation(*explanation);
  text += fmt::format("precompiled header: {}\n", pch);
  if (!nearest) {
    text += "the cache has no entries to compare with\n";
  } else {
    const int category = std::get<0>(nearest->rank);
    text += fmt::format("nearest entry: {} ({}, {}, last used {} ago){}\n", nearest->file.file_hash.hex(),
                        nearest->source, nearest->target, format_age(nearest->file.mtime),
                        category == 0   ? ""
                        : category == 1 ? " -- same kernels, another source"
                        : category == 2 ? " -- same source, other kernels"
                                        : " -- no entry has this source or these kernels");
    text +=
        fmt::format("{} (entry -> request):\n", nearest->differences.size() == 1
                                                    ? std::string("1 key part differs")
                                                    : fmt::format("{} key parts differ", nearest->differences.size()));
    for (const cache::KeyDifference& d : nearest->differences) {
      text += fmt::format("  {}: {}\n", d.name, one_line(d.description));
    }
  }
  std::cout << text;
  return kExitFound;
}

}  // namespace

void add_why_miss_command(CLI::App& cache, Commands& commands) {
  auto why = std::make_shared<WhyMissArgs>();
  CLI::App* why_app = cache.add_subcommand(
      "why-miss", "Would this request hit? If not, the nearest entry and exactly which key parts differ");
  why_app->add_option("--source", why->source, "The kernel source file");
  why_app->add_option("--builtin", why->builtin, "A built-in source by name, e.g. saxpy");
  why_app->add_option("--header", why->headers, "An in-memory header for --source: FILE or NAME=FILE (repeatable)");
  why_app->add_option("-k,--kernel", why->kernels, "The kernel name or name expression (repeatable with --one-program)")
      ->required();
  why_app->add_option("-o,--option", why->options, "A portable compile option (repeatable), e.g. --option=--fast-math");
  why_app->add_option("-I,--include-path", why->include_dirs,
                      "An include folder, searched in the order given after any given with --option (repeatable)");
  why_app->add_flag("--toolkit-includes", why->toolkit_includes, "Search the toolkit's own headers after the -I folders");
  why_app->add_option("-t,--target", why->target, "The target, e.g. sm_90, gfx90a")->required();
  why_app->add_flag("--one-program", why->one_program, "The kernels were requested as one program");
  why_app->add_flag("--json", why->json, "Print JSON");
  why_app->footer("Exit status: 0 it would hit, 1 it would miss, 2 error.");
  commands.push_back({why_app, [why] { return run_why_miss(*why); }});
}

}  // namespace kiln::cli
