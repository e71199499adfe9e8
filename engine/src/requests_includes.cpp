// Which files a request with include folders reads, and so its entry key: Requests' side of the include
// home (its facade, kiln/includes/include_home.hpp), which settles the dependency part from the manifest
// or by resolving the includes, retries with a header the compiler asked for, and records. Here the
// request is handed over (with its vendor's traits from the vendor table), keyed, and the home's
// IncludeError becomes the request's ConfigError.
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compilers.hpp"
#include "kiln/cache/dependencies.hpp"
#include "kiln/error.hpp"
#include "kiln/includes/include_home.hpp"
#include "requests.hpp"
#include "vendor_table.hpp"

namespace kiln::detail {
namespace {

/// Calls the include home. Its IncludeError (a folder or header it cannot use) is the request's
/// ConfigError, with the same message.
template <class Call>
auto config_errors(Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const includes::IncludeError& e) {
    throw ConfigError(e.what());
  }
}

}  // namespace

std::vector<std::filesystem::path> Requests::include_folders(const Options& options, Vendor vendor) {
  const std::vector<std::filesystem::path> dirs(options.include_dirs().begin(), options.include_dirs().end());
  std::optional<std::filesystem::path> library;
  if (options.toolkit_includes()) library = m_compilers.library(vendor);
  return config_errors([&] { return m_includes->folders(dirs, library ? &*library : nullptr); });
}

includes::SettleInput Requests::include_request(const Request& r, std::vector<includes::MemoryHeader>& headers) {
  headers.clear();
  for (const Header& h : r.source.headers()) headers.push_back({h.name, h.text});
  includes::SettleInput input;
  input.request_hash = r.request_hash;
  input.request_canonical = r.request_key.bytes();
  input.source_name = r.source.name();
  input.source_text = r.source.text();
  input.memory_headers = headers;
  input.folders = r.include_folders;
  input.traits = vendor_row(r.target.vendor).includes;
  input.retry_names = r.retry_names;
  input.flags = r.flags;
  input.compiler = r.compiler;
  input.full = r.full_headers;
  return input;
}

void Requests::settle(Request& r, const Settle& how) {
  if (!r.reads_files) return;
  switch (how.mode) {
    case Settle::Mode::manifest:
      settle_includes(r, /*use_manifest=*/true);
      return;
    case Settle::Mode::manifest_only:
      (void)settle_by_manifest(r);
      return;
    case Settle::Mode::planned:
      // The plan asked the manifest already: what it found is taken as recorded, and what it could not
      // settle is resolved without asking again.
      if (!how.planned_key) {
        settle_includes(r, /*use_manifest=*/false);
      } else if (!settle_as_recorded(r, *how.planned_key)) {
        settle_includes(r, /*use_manifest=*/true);  // the manifest changed since the plan: as any request
      }
      return;
  }
}

void Requests::settle_includes(Request& r, bool use_manifest) {
  if (!r.reads_files) return;
  std::vector<includes::MemoryHeader> headers;
  includes::SettleInput input = include_request(r, headers);
  if (r.ahead) input.ahead = &*r.ahead;
  includes::Settled settled = config_errors([&] { return m_includes->settle(input, use_manifest); });
  r.ahead.reset();  // taken or not, once
  // By the manifest (no resolve: `includes` is null; the home checked that its answer is this request
  // keyed with that part) or by a resolve: the entry key is the request key plus the part either way.
  r.dependency_part = std::move(settled.dependency_part);
  r.includes = std::move(settled.includes);
  key_with_dependencies(r);
}

bool Requests::settle_by_manifest(Request& r) {
  std::vector<includes::MemoryHeader> headers;
  const includes::SettleInput input = include_request(r, headers);
  std::optional<includes::Settled> settled = config_errors([&] { return m_includes->settle_by_manifest(input); });
  if (!settled) return false;
  r.dependency_part = std::move(settled->dependency_part);
  r.includes = std::move(settled->includes);
  key_with_dependencies(r);
  return true;
}

bool Requests::settle_as_recorded(Request& r, const cache::Hash128& entry_key) {
  // What the manifest records for that entry, unchecked by stat (the plan checked it a moment ago), taken
  // only when it keys this request as the plan found it: a plan made with another compiler's identity, or a
  // manifest rewritten since, is no answer.
  std::optional<cache::DependencySet> recorded = m_includes->recorded(r.request_hash, r.request_key.bytes(), entry_key);
  if (!recorded) return false;
  std::string part = cache::canonical_dependencies(*recorded);
  if (includes::entry_key_hash(r.request_key.bytes(), part) != entry_key) return false;
  r.dependency_part = std::move(part);
  r.includes.reset();
  r.ahead.reset();
  key_with_dependencies(r);
  return true;
}

std::optional<Request> Requests::retry_with_missing_header(const Request& r, const CompileError& error) {
  if (!r.includes) return std::nullopt;
  std::vector<includes::MemoryHeader> headers;
  const includes::SettleInput input = include_request(r, headers);
  std::optional<includes::IncludeHome::Retry> retry =
      config_errors([&] { return m_includes->retry(input, *r.includes, error.log()); });
  if (!retry) return std::nullopt;
  Request retried = r;
  if (!retry->name.empty()) retried.retry_names.push_back(std::move(retry->name));
  retried.full_headers = retried.full_headers || retry->full;
  retried.dependency_part = std::move(retry->settled.dependency_part);
  retried.includes = std::move(retry->settled.includes);
  key_with_dependencies(retried);
  return retried;
}

void Requests::note_dependencies(const Request& r) noexcept {
  m_includes->record(r.request_hash, r.request_key.bytes(), r.includes.get(), r.hash);
}

cache::DependencySet Requests::dependencies(Request& r) {
  if (r.includes) return includes::IncludeHome::dependencies(*r.includes);
  if (!r.reads_files) return {};
  std::optional<cache::DependencySet> recorded = m_includes->recorded(r.request_hash, r.request_key.bytes(), r.hash);
  if (!recorded) {  // the manifest changed since it matched: resolve
    settle_includes(r, /*use_manifest=*/false);
    return includes::IncludeHome::dependencies(*r.includes);
  }
  return std::move(*recorded);
}

std::optional<std::vector<std::byte>> Requests::manifest_bytes(const cache::Hash128& request_key) const {
  return m_includes->manifest_bytes(request_key);
}

}  // namespace kiln::detail
