// Requests (requests.hpp): plan(), the front half of every request; building a request (its target, the
// vendor flags of its options and the engine's own flags from the vendor table, its include folders), the
// compiler's facts for it (resolving ahead while the compiler loads), its canonical key, and KILN_RECORD.
// Settling its includes is requests_includes.cpp.
#include "requests.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "c_kernels.hpp"
#include "compiler_probe.hpp"
#include "compilers.hpp"
#include "kiln/base/hot_path.hpp"
#include "kiln/base/log.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "kiln/includes/include_home.hpp"
#include "kiln/tooling/request_log.hpp"
#include "kiln/tooling/targets.hpp"
#include "lanes/lane.hpp"
#include "source_internal.hpp"
#include "vendor_table.hpp"

namespace kiln::detail {

Requests::Requests(cache::Storage& storage, cache::AtomicCounters& counters, Compilers& compilers,
                   const Devices& devices, const std::filesystem::path& record_path)
    : m_compilers(compilers),
      m_devices(devices),
      m_includes(std::make_unique<includes::IncludeHome>(storage, counters)) {
  if (!record_path.empty()) m_recorder = std::make_unique<RequestRecorder>(record_path);
}

Requests::~Requests() = default;

KILN_HOT Request Requests::plan(const Source& source, const Options& options, const std::vector<std::string>& names,
                                std::string_view target, int device, const Settle& how, bool record_it) {
  // The target: a device's own (its target and warp size), "native" the default device's, any other as given.
  std::optional<int> warp_size;
  if (device >= 0 || target == "native") {
    const vendor::Runtime& runtime = device >= 0 ? *m_devices.runtime : m_devices.usable();
    const DeviceInfo& info =
        runtime.devices()[static_cast<std::size_t>(device >= 0 ? device : m_devices.default_device)];
    target = info.target;
    warp_size = info.warp_size;  // the device's own warp size, not the target's default
  }
  Request r = make_request(source, options, names, target, warp_size,
                           /*ahead=*/how.mode != Settle::Mode::manifest_only);
  settle(r, how);
  if (record_it) record(source, options, r.requested_names(), std::string(target));
  return r;
}

KILN_HOT Request Requests::make_request(const Source& source, const Options& options,
                                        const std::vector<std::string>& names, std::string_view target_text,
                                        std::optional<int> warp_size, bool ahead) {
  Request r(source, parse_target(target_text), names);
  r.flags = options.vendor_flags(r.target.vendor);  // option errors first: they need no compiler
  if (warp_size) r.target.warp_size = *warp_size;

  for (const std::string& name : r.names) {
    if (name.empty()) throw ConfigError(fmt::format("source '{}': empty kernel name", source.name()));
  }
  std::sort(r.names.begin(), r.names.end());
  r.names.erase(std::unique(r.names.begin(), r.names.end()), r.names.end());
  take_c_kernels(r);

  // The compiler searches no folder of its own: every file it may open is one kiln resolved and keyed
  // (the vendor table says which flags make it so, vendor_table.cpp).
  const VendorRow& row = vendor_row(r.target.vendor);
  const RequestFlags& added = row.request;
  r.flags.push_back(std::string(added.arch) + r.target.arch);
  if (r.target.output == PayloadKind::ltoir && !added.lto_ir.empty()) {
    // LTO-IR is relocatable by nature (an extern __device__ function compiles without -rdc=true, and the
    // bytes with it are the same), so a request's --relocatable-device-code adds nothing here and is
    // dropped: one key for one binary.
    std::erase(r.flags, std::string(row.options.relocatable));  // what Options gives for it
    r.flags.emplace_back(added.lto_ir);
  }
  if (!added.default_device.empty() && !options.no_default_device()) r.flags.emplace_back(added.default_device);
  r.flags.emplace_back(added.no_search);
  if (row.includes.opens_absolute_paths) {
    for (const Header& h : r.source.user_headers()) {
      if (h.name.starts_with('/')) {
        throw ConfigError(fmt::format(
            "source '{}': the in-memory header '{}' has an absolute name, and {} opens an #include of an absolute "
            "path from the disk instead of the header handed to it; give the header a relative name",
            source.name(), h.name, row.compiler_name));
      }
    }
  }
  r.flags.push_back("-DKILN_WARP_SIZE=" + std::to_string(r.target.warp_size));
  if (!options.include_dirs().empty() || options.toolkit_includes()) {
    // kiln resolves the includes itself (the include home, includes/); which files that reads is settled later
    // (settle), from the dependency manifest when it still matches.
    r.include_folders = include_folders(options, r.target.vendor);
    r.reads_files = true;
  } else {
    // An absolute #include is opened by the compiler whatever its search flags; a computed one may be.
    using includes::opens_files_by_name;
    r.reads_files = opens_files_by_name(r.source.text()) ||
                    std::any_of(r.source.user_headers().begin(), r.source.user_headers().end(),
                                [](const Header& h) { return opens_files_by_name(h.text); }) ||
                    (!r.source.embedded_headers_intact() &&
                     std::any_of(r.source.headers().begin(), r.source.headers().end(),
                                 [](const Header& h) { return opens_files_by_name(h.text); }));
  }
  // The compiler's identity and targets, once the request's flags and folders are known (facts_for may
  // resolve the includes while the compiler loads).
  std::shared_ptr<const CompilerFacts> facts = facts_for(r, ahead);
  if (std::find(facts->targets.begin(), facts->targets.end(), r.target.base) == facts->targets.end()) {
    // Refusing a request is only done on the loaded compiler's word, never on a probe's alone.
    if (m_compilers.load(r.target.vendor)) facts = m_compilers.facts(r.target.vendor);
    validate_target(r.target, facts->targets, facts->identity);
  }
  make_key(r, facts->identity);
  return r;
}

void Requests::take_c_kernels(Request& r) {
  // Plain names of the source's extern "C" kernels are found by their symbol (c_kernels.hpp): they leave the
  // names the compiler and the key get, so every way of asking for such a kernel is one request. LTO-IR's body
  // is not read (its kernels cannot be checked): its names stay.
  if (r.target.output == PayloadKind::ltoir) return;
  std::vector<std::string> plain;
  for (const std::string& name : r.names) {
    if (!kiln::is_name_expression(name)) plain.push_back(name);
  }
  if (plain.empty()) return;
  std::vector<std::string_view> header_texts;
  for (const Header& h : r.source.headers()) header_texts.push_back(h.text);
  r.by_symbol = c_kernels_among(r.source.text(), header_texts, plain);
  std::erase_if(r.names, [&](const std::string& name) {
    return std::binary_search(r.by_symbol.begin(), r.by_symbol.end(), name);
  });
}

std::vector<std::string> Request::requested_names() const {
  std::vector<std::string> all = names;
  all.insert(all.end(), by_symbol.begin(), by_symbol.end());
  std::sort(all.begin(), all.end());
  return all;
}

std::shared_ptr<const CompilerFacts> Requests::facts_for(Request& r, bool ahead) {
  const Vendor v = r.target.vendor;
  if (std::shared_ptr<const CompilerFacts> known = m_compilers.known_facts(v)) return known;  // probed, or loaded
  auto resolved = ahead && r.reads_files ? resolve_ahead(r) : std::nullopt;
  std::shared_ptr<const CompilerFacts> facts = m_compilers.facts(v);
  if (resolved && resolved->first == facts->identity) r.ahead = std::move(resolved->second);
  return facts;
}

std::optional<std::pair<std::string, includes::Settled>> Requests::resolve_ahead(const Request& r) {
  // The first request of a process that compiles: loading the compiler (a dlopen of ~100 MB, tens of ms)
  // and resolving the includes (tens of ms over a large tree) both stand before the compile, and neither
  // needs the other but for the identity, which the key and the lean walk's macros name. So the compiler
  // loads on a helper thread while this one resolves for the identity its files announce. The request's
  // settle takes that resolve only when the loaded compiler reports the same identity (facts_for), and
  // only when no dependency manifest settles the request; otherwise it is dropped. A wrong guess costs
  // the time of a resolve, never a wrong set.
  const Vendor v = r.target.vendor;
  if (m_compilers.load_tried(v)) return std::nullopt;
  const std::optional<std::filesystem::path> library = m_compilers.file(v);
  if (!library) return std::nullopt;
  std::optional<std::string> identity = vendor::expected_identity(v, *library);
  if (!identity) return std::nullopt;
  std::thread loader;
  try {
    loader = std::thread([this, v] {
      try {
        (void)m_compilers.load(v);
      } catch (...) {
        // Not an Error (those become the lane's error): the load did not complete, and Compilers::facts()
        // below makes it again on the request's thread, where the exception reaches the caller.
      }
    });
  } catch (const std::system_error&) {
    return std::nullopt;  // no thread: the load runs where it always did
  }
  std::optional<std::pair<std::string, includes::Settled>> out;
  try {
    std::vector<includes::MemoryHeader> headers;
    includes::SettleInput input = include_request(r, headers);
    input.compiler = *identity;
    KILN_LOG(debug, "{}: resolving the includes for '{}' while the compiler loads", r.source.name(), *identity);
    includes::Settled settled = m_includes->resolve_ahead(input);
    out.emplace(std::move(*identity), std::move(settled));
  } catch (...) {
    // Whatever stopped the resolve stops the request's own settle too, which reports it.
  }
  loader.join();
  return out;
}

KILN_HOT void Requests::make_key(Request& r, const std::string& compiler_identity) {
  // The canonical key: every input that can change the binary, in one fixed order.
  r.compiler = compiler_identity;
  r.key = cache::CanonicalKey();
  r.key.add("format", std::to_string(cache::kEntryFormatVersion));
  r.key.add("vendor", to_string(r.target.vendor));
  r.key.add("compiler", r.compiler);
  r.key.add("target", r.target.full);
  r.key.add("options", join(r.flags, '\n'));
  if (const std::span<const char* const> variables = vendor_row(r.target.vendor).request.key_environment;
      !variables.empty()) {
    std::string environment;
    for (const char* variable : variables) {
      const char* value = std::getenv(variable);
      environment += fmt::format("{}={}\n", variable, value != nullptr ? value : "");
    }
    r.key.add("env", environment);
  }
  r.key.add("names", join(r.names, '\n'));
  r.key.add("source-name", r.source.name());  // the compiler's file name: __FILE__ carries it into the binary
  r.key.add("source", r.source.text());
  if (r.source.embedded_headers_intact()) {
    // kiln's own headers as built: named by their digest (see source_internal.hpp), not their text.
    for (const Header& h : r.source.user_headers()) r.key.add("header:" + h.name, h.text);
    r.key.add("embedded-headers", embedded_headers_digest());
  } else {
    for (const Header& h : r.source.headers()) r.key.add("header:" + h.name, h.text);
  }
  if (r.reads_files) {
    // The two-level key: the request key holds the folders searched (absolute: the same relative -I in
    // another directory is another request); the entry's key adds what was read there, by path and
    // digest, and every place probed and found empty before a match.
    std::string folders;
    for (const std::filesystem::path& folder : r.include_folders) folders += folder.string() + '\n';
    r.key.add("include-folders", folders);
    r.request_key = r.key;
    r.request_hash = r.key.hash();
    if (!r.dependency_part.empty()) r.key.add("dependencies", r.dependency_part);
  }
  seal_key(r);
}

void Requests::key_with_dependencies(Request& r) {
  // What make_key gives for the settled part, without building the request key's parts again.
  r.key = r.request_key;
  r.key.add("dependencies", r.dependency_part);
  r.settled = true;
  seal_key(r);
}

KILN_HOT void Requests::seal_key(Request& r) {
  try {
    cache::check_canonical_key(r.key.bytes());  // the readers' limit: refuse before compiling what no one could read
  } catch (const std::length_error& e) {
    throw ConfigError(fmt::format("source '{}' for {}: {}", r.source.name(), r.target.full, e.what()));
  }
  r.hash = r.key.hash();
}

KILN_HOT void Requests::record(const Source& source, const Options& options, const std::vector<std::string>& names,
                               const std::string& target) {
  if (!m_recorder) return;
  RecordedRequest record;
  record.source_name = source.name();
  record.builtin = source.is_builtin();
  record.source_hash = source.content_hash().hex();
  if (!source.is_builtin()) {
    record.source_text = std::string(source.text());
    // Only the user's headers: kiln's own embedded headers are found again by name at replay.
    record.headers.assign(source.user_headers().begin(), source.user_headers().end());
  }
  record.name_expressions = names;
  record.options = options.portable();
  for (std::string& option : record.options) {
    // Include folders as absolute paths: a replay runs from another directory (and the key holds them so).
    for (const std::string_view prefix : {std::string_view("-I"), std::string_view("--include-path=")}) {
      if (!option.starts_with(prefix)) continue;
      const std::filesystem::path folder(option.substr(prefix.size()));
      if (folder.is_relative()) {
        std::error_code ec;
        const std::filesystem::path absolute = std::filesystem::absolute(folder, ec);
        if (!ec) option = std::string(prefix) + absolute.lexically_normal().string();
      }
      break;
    }
  }
  record.target = target;
  m_recorder->record(record);
}

}  // namespace kiln::detail
