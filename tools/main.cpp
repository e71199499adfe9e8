// kiln: prewarm, inspect, verify and trim kiln kernel caches; list devices and vendor libraries.
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "formatting.hpp"
#include "kiln/error.hpp"

namespace {

constexpr const char* kFooter =
    R"(Environment: KILN_CACHE_DIR, KILN_CACHE_READONLY, KILN_CACHE_MAXSIZE, KILN_CACHE_PACKS,
KILN_RECORD, KILN_VENDOR, KILN_DEVICE, KILN_LOG=error|warn|info|debug (all: docs/configuration.md).
Exit status: 0 done; 1 done, and something was found (a failed prewarm request, a bad entry, a
request that would miss); 2 bad input or an error that stopped the command.)";

void print_error(const std::string& message) { std::cerr << "kiln: error: " << kiln::cli::one_line(message) << '\n'; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln: JIT-compiled GPU kernels, their cache and the devices that run them", "kiln"};
  app.footer(kFooter);
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", fmt::format("kiln {}", KILN_CLI_VERSION));
  std::string cache_dir;
  CLI::Option* cache_dir_option =
      app.add_option("--cache-dir", cache_dir, "Use this cache root (overrides KILN_CACHE_DIR)");

  kiln::cli::Commands commands;
  kiln::cli::add_devices_command(app, commands);
  kiln::cli::add_prewarm_command(app, commands);
  kiln::cli::add_cache_commands(app, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line. A missing or unknown command is named with the commands that exist at that level.
    const CLI::App* level = &app;
    std::string path = "kiln";
    for (bool deeper = true; deeper;) {
      deeper = false;
      for (const CLI::App* sub : level->get_subcommands({})) {
        if (sub->parsed()) {  // the deepest command given: its --help describes the bad argument
          level = sub;
          path += " " + sub->get_name();
          deeper = true;
          break;
        }
      }
    }
    if (std::string(e.what()).find("subcommand is required") != std::string::npos) {
      std::string names;
      for (const CLI::App* sub : level->get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
      print_error(
          fmt::format("unknown or missing command after '{}' (commands: {}; see {} --help)", path, names, path));
    } else {
      print_error(fmt::format("{}: {} (see {} --help)", path, e.what(), path));
    }
    return kiln::cli::kExitError;
  }

  if (cache_dir_option->count() > 0) {
    // An empty value is almost always an unset shell variable: never fall back to the default cache.
    if (cache_dir.empty()) {
      print_error("--cache-dir is empty: give a directory, or leave the flag out to use KILN_CACHE_DIR or the default");
      return kiln::cli::kExitError;
    }
    ::setenv("KILN_CACHE_DIR", cache_dir.c_str(), 1);
  }

  // Run the most deeply nested parsed command (e.g. "cache ls" rather than "cache").
  const kiln::cli::Command* chosen = nullptr;
  std::size_t depth = 0;
  for (const kiln::cli::Command& command : commands) {
    if (!command.app->parsed()) continue;
    std::size_t d = 0;
    for (const CLI::App* parent = command.app; parent != nullptr; parent = parent->get_parent()) ++d;
    if (chosen == nullptr || d > depth) {
      chosen = &command;
      depth = d;
    }
  }
  if (chosen == nullptr) {
    print_error("no command given (see kiln --help)");
    return kiln::cli::kExitError;
  }
  try {
    return chosen->run();
  } catch (const kiln::cli::UsageError& e) {
    print_error(e.what());
  } catch (const kiln::Error& e) {
    print_error(e.what());
  } catch (const std::exception& e) {
    print_error(e.what());
  }
  return kiln::cli::kExitError;
}
