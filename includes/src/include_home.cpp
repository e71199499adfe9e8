// The include home's one door (kiln/includes/include_home.hpp): the engine's calls, handed to the work
// behind them (IncludeFolders, the dependency manifests, the scan and the compiler log's readers).
#include "kiln/includes/include_home.hpp"

#include "include_folders.hpp"
#include "kiln/base/xxh3.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/includes/dep_manifest.hpp"
#include "resolve.hpp"
#include "scan.hpp"

namespace kiln::includes {

/// The home's state: the manifests of the storage's cache root (in its mode) and the resolves' side.
struct IncludeHome::Impl {
  Impl(cache::Storage& storage, cache::AtomicCounters& counters)
      : manifests(cache::manifest_config_of(storage.local())), folders(manifests, storage, counters) {}
  cache::DependencyManifests manifests;
  cache::detail::IncludeFolders folders;  ///< borrows `manifests`: declared after it
};

IncludeHome::IncludeHome(cache::Storage& storage, cache::AtomicCounters& counters)
    : m_impl(std::make_unique<Impl>(storage, counters)) {}

IncludeHome::~IncludeHome() = default;

std::vector<std::filesystem::path> IncludeHome::folders(std::span<const std::filesystem::path> include_dirs,
                                                        const std::filesystem::path* toolkit_library) const {
  return m_impl->folders.folders(include_dirs, toolkit_library);
}

Settled IncludeHome::settle(const SettleInput& input, bool use_manifest) {
  return m_impl->folders.settle(input, use_manifest);
}

std::optional<Settled> IncludeHome::settle_by_manifest(const SettleInput& input) {
  return m_impl->folders.settle_by_manifest(input);
}

Settled IncludeHome::resolve_ahead(const SettleInput& input) { return m_impl->folders.resolve_ahead(input); }

std::optional<IncludeHome::Retry> IncludeHome::retry(const SettleInput& input, const ResolvedIncludes& resolved,
                                                     std::string_view compile_log) {
  return m_impl->folders.retry(input, resolved, compile_log);
}

void IncludeHome::record(const Hash128& request_hash, std::string_view request_canonical,
                         const ResolvedIncludes* resolved, const Hash128& entry_hash) noexcept {
  m_impl->folders.record(request_hash, request_canonical, resolved, entry_hash);
}

std::optional<cache::DependencySet> IncludeHome::recorded(const Hash128& request_hash,
                                                          std::string_view request_canonical,
                                                          const Hash128& entry_hash) const {
  return m_impl->manifests.recorded(request_hash, request_canonical, entry_hash);
}

std::optional<std::vector<std::byte>> IncludeHome::manifest_bytes(const Hash128& request_hash) const {
  return m_impl->manifests.bytes(request_hash);
}

CompilerView IncludeHome::compiler_view(const ResolvedIncludes& resolved) noexcept {
  return CompilerView{resolved.compiler_source, resolved.compiler_headers, resolved.prelude_end};
}

const cache::DependencySet& IncludeHome::dependencies(const ResolvedIncludes& resolved) noexcept {
  return resolved.dependencies;
}

Hash128 entry_key_hash(std::string_view request_canonical, std::string_view dependency_part) noexcept {
  // The bytes CanonicalKey::add() appends for the part (its grammar, not written again here), streamed after
  // the request key's: the same XXH3-128 as hash() of the key the engine builds, without copying the request
  // key (it holds the source). An empty key's bytes are the grammar's magic alone.
  try {
    cache::CanonicalKey part;
    part.add("dependencies", dependency_part);
    const std::string_view appended = std::string_view(part.bytes()).substr(cache::CanonicalKey().bytes().size());
    cache::detail::Xxh3Stream stream(cache::kKeySeed);
    stream.update(request_canonical.data(), request_canonical.size());
    stream.update(appended.data(), appended.size());
    return stream.digest();
  } catch (...) {  // std::bad_alloc: no key, so no manifest's answer is taken
    return Hash128{};
  }
}

bool opens_files_by_name(std::string_view text) { return cache::detail::opens_files_by_name(text); }

std::size_t prelude_end(std::string_view source) {
  // Only an #include can end a prelude: a source without the word needs no scan.
  if (source.find("include") == std::string_view::npos) return 0;
  cache::detail::ScanResult scan;
  cache::detail::scan_includes(source, scan);
  return scan.prelude_end;
}

}  // namespace kiln::includes
