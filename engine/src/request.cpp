// Building a request: its target, the vendor flags of its options and the engine's own flags, its
// include folders, and its canonical key.
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
#include "engine_internal.hpp"
#include "kiln/base/hot_path.hpp"
#include "kiln/base/log.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "kiln/includes/include_home.hpp"
#include "kiln/tooling/targets.hpp"
#include "lanes/lane.hpp"
#include "request.hpp"
#include "source_internal.hpp"

namespace kiln::detail {
namespace {

/// Environment variables that silently change HIPRTC's flags: part of every AMD key.
constexpr const char* kHipEnvironment[] = {"HIPRTC_COMPILE_OPTIONS_APPEND", "HIPRTC_LINK_OPTIONS_APPEND",
                                           "GPU_ENABLE_WGP_MODE"};

}  // namespace

KILN_HOT EngineCore::Request EngineCore::make_request(const Source& source, const Options& options,
                                                      const std::vector<std::string>& names,
                                                      std::string_view target_text, std::optional<int> warp_size) {
  Request r(source, parse_target(target_text), names);
  r.flags = options.vendor_flags(r.target.vendor);  // option errors first: they need no compiler
  if (warp_size) r.target.warp_size = *warp_size;

  for (const std::string& name : r.names) {
    if (name.empty()) throw ConfigError(fmt::format("source '{}': empty kernel name", source.name()));
  }
  std::sort(r.names.begin(), r.names.end());
  r.names.erase(std::unique(r.names.begin(), r.names.end()), r.names.end());
  take_c_kernels(r);

  // The compiler searches no folder of its own: every file it may open is one kiln resolved and keyed.
  // NVRTC looks up a quoted include next to its includer, which for the source (and an in-memory header)
  // means the process's working directory: --no-source-include turns that off. HIPRTC (clang) searches
  // the system folders (/usr/include, ...) for an <include>: -nostdlibinc turns that off and keeps
  // clang's own builtin headers, which belong to the compiler the key names.
  if (r.target.vendor == Vendor::cuda) {
    r.flags.push_back("-arch=" + r.target.arch);
    if (r.target.output == PayloadKind::ltoir) {
      // LTO-IR: NVRTC's -dlto with the virtual arch (NVRTC 13.0 refuses -arch=lto_XY; -arch=sm_XY and
      // compute_XY give the same bytes). LTO-IR is relocatable by nature (an extern __device__ function
      // compiles without -rdc=true, and the bytes with it are the same), so a request's
      // --relocatable-device-code adds nothing here and is dropped: one key for one binary.
      std::erase(r.flags, std::string("-rdc=true"));  // what Options gives for it
      r.flags.emplace_back("-dlto");
    }
    // Unannotated functions are device functions, so kiln's sources build on both vendors (HIPRTC
    // compiles them for the device anyway); --no-default-device keeps NVRTC's own default.
    if (!options.no_default_device()) r.flags.emplace_back("-default-device");
    r.flags.emplace_back("--no-source-include");
  } else {
    r.flags.push_back("--offload-arch=" + r.target.arch);
    r.flags.emplace_back("-nostdlibinc");
    for (const Header& h : r.source.user_headers()) {
      if (h.name.starts_with('/')) {
        throw ConfigError(fmt::format(
            "source '{}': the in-memory header '{}' has an absolute name, and HIPRTC opens an #include of an absolute "
            "path from the disk instead of the header handed to it; give the header a relative name",
            source.name(), h.name));
      }
    }
  }
  r.flags.push_back("-DKILN_WARP_SIZE=" + std::to_string(r.target.warp_size));
  if (!options.include_dirs().empty() || options.toolkit_includes()) {
    // kiln resolves the includes itself (the include home, includes/); which files that reads is settled later
    // (settle_includes), from the dependency manifest when it still matches.
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
  std::shared_ptr<const CompilerFacts> facts = facts_for(r);
  if (std::find(facts->targets.begin(), facts->targets.end(), r.target.base) == facts->targets.end()) {
    // Refusing a request is only done on the loaded compiler's word, never on a probe's alone.
    if (loaded_lane(r.target.vendor).compiler) facts = compiler_facts(r.target.vendor);
    validate_target(r.target, facts->targets, facts->identity);
  }
  make_key(r, facts->identity);
  return r;
}

void EngineCore::take_c_kernels(Request& r) {
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

std::vector<std::string> EngineCore::Request::requested_names() const {
  std::vector<std::string> all = names;
  all.insert(all.end(), by_symbol.begin(), by_symbol.end());
  std::sort(all.begin(), all.end());
  return all;
}

std::shared_ptr<const CompilerFacts> EngineCore::facts_for(Request& r) {
  const Vendor v = r.target.vendor;
  if (std::shared_ptr<const CompilerFacts> known = known_compiler_facts(v)) return known;  // probed, or loaded
  auto ahead = r.reads_files ? resolve_ahead(r) : std::nullopt;
  std::shared_ptr<const CompilerFacts> facts = compiler_facts(v);
  if (ahead && ahead->first == facts->identity) r.ahead = std::move(ahead->second);
  return facts;
}

std::optional<std::pair<std::string, includes::Settled>> EngineCore::resolve_ahead(const Request& r) {
  // The first request of a process that compiles: loading the compiler (a dlopen of ~100 MB, tens of ms)
  // and resolving the includes (tens of ms over a large tree) both stand before the compile, and neither
  // needs the other but for the identity, which the key and the lean walk's macros name. So the compiler
  // loads on a helper thread while this one resolves for the identity its files announce. The request's
  // settle takes that resolve only when the loaded compiler reports the same identity (facts_for), and
  // only when no dependency manifest settles the request; otherwise it is dropped. A wrong guess costs
  // the time of a resolve, never a wrong set.
  const Vendor v = r.target.vendor;
  Lane& l = v == Vendor::cuda ? *m_cuda : *m_hip;
  if (l.load_tried.load(std::memory_order_acquire)) return std::nullopt;
  const std::optional<std::filesystem::path> library = compiler_file(v);
  if (!library) return std::nullopt;
  std::optional<std::string> identity = vendor::expected_identity(v, *library);
  if (!identity) return std::nullopt;
  std::thread loader;
  try {
    loader = std::thread([this, v] {
      try {
        (void)loaded_lane(v);
      } catch (...) {
        // Not an Error (those become the lane's error): the load did not complete, and compiler_facts()
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

KILN_HOT void EngineCore::make_key(Request& r, const std::string& compiler_identity) {
  // The canonical key: every input that can change the binary, in one fixed order.
  r.compiler = compiler_identity;
  r.key = cache::CanonicalKey();
  r.key.add("format", std::to_string(cache::kEntryFormatVersion));
  r.key.add("vendor", to_string(r.target.vendor));
  r.key.add("compiler", r.compiler);
  r.key.add("target", r.target.full);
  r.key.add("options", join(r.flags, '\n'));
  if (r.target.vendor == Vendor::hip) {
    std::string environment;
    for (const char* variable : kHipEnvironment) {
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

void EngineCore::key_with_dependencies(Request& r) {
  // What make_key gives for the settled part, without building the request key's parts again.
  r.key = r.request_key;
  r.key.add("dependencies", r.dependency_part);
  seal_key(r);
}

KILN_HOT void EngineCore::seal_key(Request& r) {
  try {
    cache::check_canonical_key(r.key.bytes());  // the readers' limit: refuse before compiling what no one could read
  } catch (const std::length_error& e) {
    throw ConfigError(fmt::format("source '{}' for {}: {}", r.source.name(), r.target.full, e.what()));
  }
  r.hash = r.key.hash();
}

std::pair<std::string, std::optional<int>> EngineCore::resolve_target(std::string_view target) {
  if (target != "native") return {std::string(target), std::nullopt};
  const DeviceInfo& info = runtime().devices()[static_cast<std::size_t>(m_default_device)];
  return {info.target, info.warp_size};  // the device's own warp size, not the target's default
}

}  // namespace kiln::detail
