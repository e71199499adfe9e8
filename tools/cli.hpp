#pragma once
// What every `kiln` subcommand shares: exit codes, the error for bad input, and how a subcommand is
// registered (main.cpp parses, then runs the one that was chosen).
#include <functional>
#include <stdexcept>
#include <vector>

#include <CLI/CLI.hpp>

namespace kiln::cli {

/// Exit codes. 0: done; 1: done, and it found a problem (a failed prewarm request, a bad entry, a
/// request that would miss); 2: bad input or an error that stopped the command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFound = 1;
inline constexpr int kExitError = 2;

/// Bad command-line input. main() prints "kiln: error: <what>" and exits with kExitError.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A registered subcommand: its CLI11 node and what runs when it was the one parsed.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};
using Commands = std::vector<Command>;

void add_devices_command(CLI::App& app, Commands& commands);
void add_prewarm_command(CLI::App& app, Commands& commands);
void add_cache_commands(CLI::App& app, Commands& commands);

}  // namespace kiln::cli
