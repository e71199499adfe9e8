// kiln devices: every vendor lane (compiled in, libraries loaded with paths and versions, devices),
// the cache and the tiers below it.
#include <cctype>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli.hpp"
#include "formatting.hpp"
#include "json_output.hpp"
#include "kiln/engine.hpp"
#include "tiers.hpp"

namespace kiln::cli {
namespace {

struct DevicesArgs {
  bool json = false;
};

json lane_json(const LaneInfo& lane) {
  json libraries = json::array();
  for (const LibraryInfo& library : lane.libraries) {
    libraries.push_back({{"role", library.role}, {"path", library.path}, {"version", library.version}});
  }
  json devices = json::array();
  for (const DeviceInfo& device : lane.devices) {
    devices.push_back({{"ordinal", device.ordinal},
                       {"name", device.name},
                       {"target", device.target},
                       {"warp_size", device.warp_size},
                       {"total_memory", device.total_memory},
                       {"max_threads_per_block", device.max_threads_per_block},
                       {"max_shared_per_block_optin", device.max_shared_per_block_optin},
                       {"multiprocessors", device.multiprocessors}});
  }
  return {{"vendor", std::string(to_string(lane.vendor))},
          {"compiled_in", lane.compiled_in},
          {"compiler_loaded", lane.compiler_loaded},
          {"runtime_loaded", lane.runtime_loaded},
          {"status", lane.status},
          {"precompiled_headers", lane.precompiled_headers},
          {"libraries", std::move(libraries)},
          {"devices", std::move(devices)}};
}

/// "; no fleet compile lease (HTTP)": a remote whose backend cannot hold one, named as its scheme is.
std::string no_lease(std::string backend) {
  for (char& c : backend) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return fmt::format("; no fleet compile lease ({})", backend);
}

/// Why the device `requested` (KILN_DEVICE) cannot be used by an engine with `devices`, or "" when it can.
std::string device_problem(int requested, const std::vector<DeviceInfo>& devices, const Engine& engine) {
  // Device 0 is every engine's default, a compile-only engine's too (as Engine's constructor takes it).
  if (requested <= 0 || requested < static_cast<int>(devices.size())) return {};
  const std::string have = devices.empty() ? std::string("there is no device")
                                           : fmt::format("{} has {}", to_string(engine.vendor()),
                                                         counted(devices.size(), "device", "devices"));
  return fmt::format("KILN_DEVICE={} names no device here ({}): a program that runs kernels stops with a "
                     "ConfigError; prewarm and compiles for named targets work", requested, have);
}

int run_devices(const DevicesArgs& args) {
  EngineConfig config = EngineConfig::from_environment();
  // The engine is opened on the default device, so that a KILN_DEVICE this machine lacks is reported with the
  // rest (an engine refuses to open on it: that is what a program would meet).
  const int requested = config.device;
  config.device = -1;
  Engine engine(config);
  const std::string problem = device_problem(requested, engine.devices(), engine);
  const std::vector<LaneInfo> lanes = engine.lanes();
  const CacheState store = engine.cache_state();
  const std::vector<TierReport> tiers = describe_tiers(config);

  if (args.json) {
    json document = json::object();
    document["lanes"] = json::array();
    for (const LaneInfo& lane : lanes) document["lanes"].push_back(lane_json(lane));
    document["active_vendor"] = std::string(to_string(engine.vendor()));
    document["cache"] = {{"root", store.root.string()},
                         {"mode", std::string(cache::to_string(store.mode))},
                         {"mode_reason", store.mode_reason},
                         {"max_size", store.max_size}};
    document["tiers"] = json::array();
    for (const TierReport& tier : tiers) {
      document["tiers"].push_back(
          {{"kind", tier.kind}, {"location", tier.location}, {"ok", tier.ok}, {"detail", tier.detail}});
      if (!tier.security.empty()) document["tiers"].back()["security"] = tier.security;
      if (!tier.backend.empty()) document["tiers"].back()["backend"] = tier.backend;
      if (!tier.lease.empty()) document["tiers"].back()["lease"] = tier.lease;
    }
    if (requested >= 0) document["requested_device"] = requested;
    if (!problem.empty()) document["device_problem"] = problem;
    print_json(document);
    return problem.empty() ? kExitOk : kExitFound;
  }

  for (const LaneInfo& lane : lanes) {
    std::cout << fmt::format("{}: {}\n", to_string(lane.vendor), lane.status);
    for (const LibraryInfo& library : lane.libraries) {
      std::cout << fmt::format("  {:<12} {:<10} {}\n", library.role, library.version, library.path);
    }
    if (!lane.precompiled_headers.empty()) {
      std::cout << fmt::format("  precompiled headers: {}\n", lane.precompiled_headers);
    }
    for (const DeviceInfo& device : lane.devices) {
      std::cout << fmt::format("  device {}: {}  target {}  warp {}  memory {}  {} multiprocessors\n", device.ordinal,
                               device.name, device.target, device.warp_size, format_bytes(device.total_memory),
                               device.multiprocessors);
    }
    if (lane.compiled_in && lane.devices.empty() && lane.runtime_loaded) std::cout << "  no devices\n";
  }
  std::cout << fmt::format("kernels run on: {}\n",
                           engine.vendor() == Vendor::none
                               ? std::string("nothing (no device; prewarm for named targets works)")
                               : std::string(to_string(engine.vendor())));
  if (!problem.empty()) std::cout << fmt::format("device: {}\n", problem);
  std::cout << fmt::format("cache: {} ({}{}{}), limit {}\n", store.root.string(), cache::to_string(store.mode),
                           store.mode_reason.empty() ? "" : ": ", store.mode_reason, format_bytes(store.max_size));
  for (const TierReport& tier : tiers) {
    std::cout << fmt::format("{}: {} ({}{}{}{})\n", tier.kind, tier.location,
                             tier.ok ? tier.detail : "unusable: " + tier.detail, tier.security.empty() ? "" : "; ",
                             tier.security, tier.lease == "no lease" ? no_lease(tier.backend) : "");
  }
  return problem.empty() ? kExitOk : kExitFound;
}

}  // namespace

void add_devices_command(CLI::App& app, Commands& commands) {
  auto args = std::make_shared<DevicesArgs>();
  CLI::App* sub = app.add_subcommand(
      "devices", "Vendor lanes (on/off and why), the libraries loaded with their versions, each device, the cache");
  sub->add_flag("--json", args->json, "Print JSON");
  commands.push_back({sub, [args] { return run_devices(*args); }});
}

}  // namespace kiln::cli
