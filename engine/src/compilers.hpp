#pragma once
// Compilers (compilers.cpp): the engine's run-time compilers, one lane per vendor from the vendor table
// (vendor_table.hpp), indexed by Vendor. What a request needs of a compiler (its identity and targets)
// comes from its probe when one still describes the library on disk (compiler_probe.hpp); the compiler
// itself is loaded once, only to compile (or to report, or when no probe names it).
#include <array>
#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compiler_probe.hpp"
#include "kiln/cache/store.hpp"
#include "kiln/device.hpp"
#include "lanes/lane.hpp"
#include "vendor_table.hpp"

namespace kiln::detail {

class Compilers {
 public:
  /// Probes are read from and written to `store` (borrowed: it outlives this object).
  explicit Compilers(const cache::Store& store);
  ~Compilers();
  Compilers(const Compilers&) = delete;
  Compilers& operator=(const Compilers&) = delete;

  /// Reads the vendor's compiler probe (once per engine); its facts are taken when it still matches.
  void probe(Vendor vendor);
  /// Identity and targets without loading: null when no probe matches and the compiler is not loaded.
  [[nodiscard]] std::shared_ptr<const CompilerFacts> known_facts(Vendor vendor);
  /// Identity and targets: from the probe when it still matches, else from loading the compiler.
  /// Throws DeviceUnavailable when there is no compiler.
  [[nodiscard]] std::shared_ptr<const CompilerFacts> facts(Vendor vendor);
  /// Loads the compiler (once); whether there is one (else the lane's error says why).
  bool load(Vendor vendor);
  /// Whether loading the compiler was tried already (it returned, with a compiler or an error).
  [[nodiscard]] bool load_tried(Vendor vendor) const;
  /// The loaded compiler, or DeviceUnavailable saying why there is none.
  [[nodiscard]] vendor::Compiler& compiler(Vendor vendor);
  /// The file the compiler would be loaded from: the first existing full path of its search list (a stat,
  /// no load); nullopt when none exists.
  [[nodiscard]] std::optional<std::filesystem::path> file(Vendor vendor) const;
  /// The compiler library's file, for --toolkit-includes (its toolkit's include folders): file(), else the
  /// loaded library. Throws ConfigError when there is none.
  [[nodiscard]] std::filesystem::path library(Vendor vendor);
  /// Every lane as kiln devices reports it: compiled in, libraries, devices. Loads every compiler, and
  /// probes each runtime but `runtime` (the engine's, or null) for the report only.
  [[nodiscard]] std::vector<LaneInfo> report(const vendor::Runtime* runtime);

 private:
  struct Lane;
  Lane& lane(Vendor vendor);
  const Lane& lane(Vendor vendor) const;
  /// The lane with its compiler loaded (once); on failure the lane's error says why.
  Lane& loaded(Vendor vendor);

  const cache::Store& m_store;
  std::array<std::unique_ptr<Lane>, kVendorCount> m_lanes;
};

}  // namespace kiln::detail
