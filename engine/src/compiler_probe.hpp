#pragma once
// Recognising a run-time compiler without loading it.
//
// Every key holds the compiler's identity, and every request is validated against the compiler's
// target list, but a process whose kernels all come from the cache never compiles. Loading NVRTC
// (dlopen of a library of ~100 MB) costs far more than the disk hit it precedes (bench/RESULTS.md,
// section 2, `launch_bench`).
// So after the
// engine loads a compiler it writes a probe file under the cache root (<root>/compilers/) holding
// the identity and the targets, plus each library file's device, inode, size, mtime and ctime. A later
// process finds the file the compiler would be loaded from (the first existing path of the vendor's
// search list, stat only), and when the probe for that path matches every recorded file exactly it
// takes identity and targets from the probe. Anything else (a reinstalled or touched toolkit, a
// search list that starts with a bare name the dynamic loader would resolve, a damaged or planted
// probe, a memory-only or refused cache) means loading the compiler, as without probes. When the
// compiler is loaded later anyway (a miss), the engine checks its identity against the probe's.
#include <optional>
#include <string>
#include <vector>

#include "kiln/cache/store.hpp"
#include "kiln/device.hpp"
#include "lanes/lane.hpp"

namespace kiln::detail {

struct CompilerFacts {
  std::string identity;              ///< as vendor::Compiler::identity()
  std::vector<std::string> targets;  ///< as vendor::Compiler::supported_targets()
};

/// The probe for the compiler `search_list` would load, when it still describes the files on disk.
[[nodiscard]] std::optional<CompilerFacts> find_compiler_probe(const cache::Store& store, Vendor vendor,
                                                               const std::vector<std::string>& search_list) noexcept;

/// Writes the probe for a loaded compiler. Does nothing (returns false) when the compiler was not
/// loaded from the first existing path of `search_list`, or the store cannot be written.
bool remember_compiler_probe(const cache::Store& store, Vendor vendor, const std::vector<std::string>& search_list,
                             const vendor::Compiler& compiler, const CompilerFacts& facts) noexcept;

}  // namespace kiln::detail
