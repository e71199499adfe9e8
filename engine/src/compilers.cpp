// Compilers (compilers.hpp): probing a compiler without loading it, loading it when a compile (or a report)
// needs it, and what the engine reports of its lanes. Every vendor difference is the vendor table's.
#include "compilers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/base/log.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {

/// One vendor's compiler.
struct Compilers::Lane {
  explicit Lane(const VendorRow& row_in) : row(row_in) {}
  const VendorRow& row;
  std::once_flag probe_once;
  std::mutex facts_mutex;                      // facts are replaced if a loaded compiler disagrees
  std::shared_ptr<const CompilerFacts> facts;  // null: no compiler (see error)
  std::once_flag load_once;
  std::atomic<bool> load_tried{false};  // set when load_once's call returned (compiler or error set)
  std::unique_ptr<vendor::Compiler> compiler;
  std::string error;
};

Compilers::Compilers(const cache::Store& store) : m_store(store) {
  for (const VendorRow& row : vendor_rows()) m_lanes[vendor_index(row.vendor)] = std::make_unique<Lane>(row);
}

Compilers::~Compilers() = default;

Compilers::Lane& Compilers::lane(Vendor v) { return *m_lanes[vendor_index(vendor_row(v).vendor)]; }
const Compilers::Lane& Compilers::lane(Vendor v) const { return *m_lanes[vendor_index(vendor_row(v).vendor)]; }

Compilers::Lane& Compilers::loaded(Vendor v) {
  Lane& l = lane(v);
  std::call_once(l.load_once, [&] {
    try {
      l.compiler = l.row.load_compiler();
    } catch (const Error& e) {
      l.error = e.what();
      l.load_tried.store(true, std::memory_order_release);
      return;
    }
    auto loaded =
        std::make_shared<const CompilerFacts>(CompilerFacts{l.compiler->identity(), l.compiler->supported_targets()});
    std::shared_ptr<const CompilerFacts> probed;
    {
      const std::lock_guard lock(l.facts_mutex);
      probed = l.facts;
      l.facts = loaded;
    }
    if (probed && probed->identity != loaded->identity) {
      KILN_LOG(warn, "the compiler probe said '{}' but the loaded compiler is '{}'; probe rewritten", probed->identity,
               loaded->identity);
    }
    if (!probed || probed->identity != loaded->identity || probed->targets != loaded->targets) {
      (void)remember_compiler_probe(m_store, v, l.row.search_list(), *l.compiler, *loaded);
    }
    l.load_tried.store(true, std::memory_order_release);
  });
  return l;
}

void Compilers::probe(Vendor v) {
  Lane& l = lane(v);
  std::call_once(l.probe_once, [&] {
    if (std::optional<CompilerFacts> probed = find_compiler_probe(m_store, v, l.row.search_list())) {
      const std::lock_guard lock(l.facts_mutex);
      if (!l.facts) l.facts = std::make_shared<const CompilerFacts>(std::move(*probed));
    }
  });
}

std::shared_ptr<const CompilerFacts> Compilers::known_facts(Vendor v) {
  Lane& l = lane(v);
  probe(v);
  const std::lock_guard lock(l.facts_mutex);
  return l.facts;
}

std::shared_ptr<const CompilerFacts> Compilers::facts(Vendor v) {
  if (std::shared_ptr<const CompilerFacts> known = known_facts(v)) return known;
  Lane& l = loaded(v);  // no usable probe: load the compiler, which sets the facts (or the error)
  const std::lock_guard lock(l.facts_mutex);
  if (!l.facts) throw DeviceUnavailable(l.error);
  return l.facts;
}

bool Compilers::load(Vendor v) { return loaded(v).compiler != nullptr; }

bool Compilers::load_tried(Vendor v) const { return lane(v).load_tried.load(std::memory_order_acquire); }

vendor::Compiler& Compilers::compiler(Vendor v) {
  Lane& l = loaded(v);
  if (!l.compiler) throw DeviceUnavailable(l.error);
  return *l.compiler;
}

std::vector<LaneInfo> Compilers::report(const vendor::Runtime* runtime) {
  std::vector<LaneInfo> out;
  for (const VendorRow& row : vendor_rows()) {
    const Vendor v = row.vendor;
    LaneInfo info;
    info.vendor = v;
    info.compiled_in = row.compiled_in;
    Lane& l = loaded(v);
    info.compiler_loaded = l.compiler != nullptr;
    if (l.compiler) {
      for (LibraryInfo& lib : l.compiler->libraries()) info.libraries.push_back(std::move(lib));
      info.precompiled_headers = l.compiler->precompiled_headers();
    }
    std::vector<std::string> problems;
    if (!l.compiler) problems.push_back(l.error);
    if (runtime != nullptr && runtime->vendor() == v) {
      info.runtime_loaded = true;
      for (LibraryInfo& lib : runtime->libraries()) info.libraries.push_back(std::move(lib));
      info.devices = runtime->devices();
    } else if (info.compiled_in) {
      // Not the engine's runtime: probe it for the report only.
      try {
        std::unique_ptr<vendor::Runtime> probe = row.load_runtime();
        info.runtime_loaded = true;
        for (LibraryInfo& lib : probe->libraries()) info.libraries.push_back(std::move(lib));
        info.devices = probe->devices();
      } catch (const Error& e) {
        problems.push_back(e.what());
      }
    }
    if (!info.compiled_in) {
      info.status = row.lane_status;
    } else if (problems.empty()) {
      info.status = fmt::format("on: compiler and runtime loaded, {} device(s)", info.devices.size());
    } else if (info.compiler_loaded) {
      info.status = fmt::format("compile-only (no runtime: {})", fmt::join(problems, "; "));
    } else {
      info.status = fmt::format("off: {}", fmt::join(problems, "; "));
    }
    out.push_back(std::move(info));
  }
  return out;
}

std::optional<std::filesystem::path> Compilers::file(Vendor v) const {
  for (const std::string& candidate : lane(v).row.search_list()) {
    std::error_code ec;
    if (candidate.find('/') != std::string::npos && std::filesystem::is_regular_file(candidate, ec)) {
      return std::filesystem::weakly_canonical(candidate, ec);
    }
  }
  return std::nullopt;
}

std::filesystem::path Compilers::library(Vendor v) {
  // The file the compiler is (or would be) loaded from: the first existing full path of its search
  // list (a stat, no load), else the loaded library itself.
  if (std::optional<std::filesystem::path> found = file(v)) return *found;
  Lane& l = loaded(v);
  if (l.compiler) {
    for (const LibraryInfo& library : l.compiler->libraries()) {
      if (library.role == l.row.compiler_role) {
        std::error_code ec;
        return std::filesystem::weakly_canonical(library.path, ec);
      }
    }
  }
  throw ConfigError(fmt::format(
      "--toolkit-includes: no {} compiler library was found to take the toolkit's headers from", to_string(v)));
}

}  // namespace kiln::detail
