#pragma once
// Private to the include home (includes/src/): the check of a dependency manifest that came from
// another machine, before DependencyManifests::install() writes it here (dep_manifest.hpp, ManifestScope
// and FetchedLimits). Such a manifest is untrusted: whatever it names this node stats, reads and hashes,
// and the result key it then asks a remote for depends on the digests it found. So the check first holds
// the manifest's counts and every path it names to the request's scope, opening nothing, and only then
// reads each header once, within a budget of bytes and time.
#include <cstdint>
#include <string>

#include "kiln/includes/dep_manifest.hpp"
#include "manifest_view.hpp"

namespace kiln::cache::detail {

/// What check_fetched() found.
struct FetchedCheck {
  /// Why the manifest may not be installed (empty: it may): a count over FetchedLimits, a path outside
  /// the scope, or the budget spent.
  std::string refused;
  std::uint32_t reads = 0;         ///< headers read and hashed
  std::uint64_t bytes_hashed = 0;  ///< their bytes
  std::uint32_t verified = 0;      ///< header infos whose digest is the one found (their stat filled in)
};

/// Checks a fetched manifest (`view`, parsed for the request) against `scope` and config.fetched, then reads
/// each header path once (read_header_file, config.limits.max_header_bytes, config.trust_window): a header
/// info whose digest is the one read gets the stat read and its trust; every other gets no stat, untrusted.
/// `view` is changed only when nothing is refused. Never throws but std::bad_alloc.
[[nodiscard]] FetchedCheck check_fetched(ManifestView& view, const ManifestScope& scope, const ManifestConfig& config);

}  // namespace kiln::cache::detail
