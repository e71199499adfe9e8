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
