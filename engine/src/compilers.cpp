// The engine's compilers: probing a compiler without loading it, loading it when a compile (or a report)
// needs it, and what the engine reports of its lanes.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiler_probe.hpp"
#include "compilers.hpp"
#include "engine_internal.hpp"
#include "kiln/base/log.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {

EngineCore::Lane& EngineCore::loaded_lane(Vendor v) {
  Lane& l = v == Vendor::cuda ? *m_cuda : *m_hip;
  std::call_once(l.load_once, [&] {
    try {
      l.compiler = v == Vendor::cuda ? vendor::load_nvrtc() : vendor::load_hiprtc();
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
      (void)remember_compiler_probe(store(), v, l.search_list(), *l.compiler, *loaded);
    }
    l.load_tried.store(true, std::memory_order_release);
  });
  return l;
}

void EngineCore::probe_compiler(Lane& l) {
  std::call_once(l.probe_once, [&] {
    if (std::optional<CompilerFacts> probed = find_compiler_probe(store(), l.vendor, l.search_list())) {
      const std::lock_guard lock(l.facts_mutex);
      if (!l.facts) l.facts = std::make_shared<const CompilerFacts>(std::move(*probed));
    }
  });
}

std::shared_ptr<const CompilerFacts> EngineCore::known_compiler_facts(Vendor v) {
  Lane& l = v == Vendor::cuda ? *m_cuda : *m_hip;
  probe_compiler(l);
  const std::lock_guard lock(l.facts_mutex);
  return l.facts;
}

std::shared_ptr<const CompilerFacts> EngineCore::compiler_facts(Vendor v) {
  if (std::shared_ptr<const CompilerFacts> known = known_compiler_facts(v)) return known;
  Lane& l = v == Vendor::cuda ? *m_cuda : *m_hip;
  (void)loaded_lane(v);  // no usable probe: load the compiler, which sets the facts (or the error)
  const std::lock_guard lock(l.facts_mutex);
  if (!l.facts) throw DeviceUnavailable(l.error);
  return l.facts;
}

vendor::Compiler& EngineCore::compiler(Vendor v) {
  Lane& l = loaded_lane(v);
  if (!l.compiler) throw DeviceUnavailable(l.error);
  return *l.compiler;
}

std::vector<std::string> EngineCore::default_targets() const {
  std::vector<std::string> targets;
  for (const DeviceInfo& d : devices()) {
    if (std::find(targets.begin(), targets.end(), d.target) == targets.end()) targets.push_back(d.target);
  }
  if (targets.empty()) targets = {"sm_90", "gfx90a"};
  return targets;
}

std::vector<LaneInfo> EngineCore::lanes() {
  std::vector<LaneInfo> out;
  for (Vendor v : {Vendor::cuda, Vendor::hip}) {
    LaneInfo info;
    info.vendor = v;
    info.compiled_in = v == Vendor::cuda ? KILN_HAVE_CUDA : KILN_HAVE_HIP;
    Lane& l = loaded_lane(v);
    info.compiler_loaded = l.compiler != nullptr;
    if (l.compiler) {
      for (LibraryInfo& lib : l.compiler->libraries()) info.libraries.push_back(std::move(lib));
      info.precompiled_headers = l.compiler->precompiled_headers();
    }
    std::vector<std::string> problems;
    if (!l.compiler) problems.push_back(l.error);
    if (m_runtime && m_runtime->vendor() == v) {
      info.runtime_loaded = true;
      for (LibraryInfo& lib : m_runtime->libraries()) info.libraries.push_back(std::move(lib));
      info.devices = m_runtime->devices();
    } else if (info.compiled_in) {
      // Not the engine's runtime: probe it for the report only.
      try {
        std::unique_ptr<vendor::Runtime> probe =
            v == Vendor::cuda ? vendor::load_cuda_runtime() : vendor::load_hip_runtime();
        info.runtime_loaded = true;
        for (LibraryInfo& lib : probe->libraries()) info.libraries.push_back(std::move(lib));
        info.devices = probe->devices();
      } catch (const Error& e) {
        problems.push_back(e.what());
      }
    }
    if (!info.compiled_in) {
      info.status = v == Vendor::cuda ? "CUDA lane " KILN_CUDA_STATUS : "HIP lane " KILN_HIP_STATUS;
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

std::optional<std::filesystem::path> EngineCore::compiler_file(Vendor v) const {
  const Lane& l = v == Vendor::cuda ? *m_cuda : *m_hip;
  for (const std::string& candidate : l.search_list()) {
    std::error_code ec;
    if (candidate.find('/') != std::string::npos && std::filesystem::is_regular_file(candidate, ec)) {
      return std::filesystem::weakly_canonical(candidate, ec);
    }
  }
  return std::nullopt;
}

std::filesystem::path EngineCore::compiler_library(Vendor v) {
  // The file the compiler is (or would be) loaded from: the first existing full path of its search
  // list (a stat, no load), else the loaded library itself.
  if (std::optional<std::filesystem::path> file = compiler_file(v)) return *file;
  Lane& loaded = loaded_lane(v);
  if (loaded.compiler) {
    for (const LibraryInfo& library : loaded.compiler->libraries()) {
      if (library.role == "nvrtc" || library.role == "hiprtc") {
        std::error_code ec;
        return std::filesystem::weakly_canonical(library.path, ec);
      }
    }
  }
  throw ConfigError(fmt::format(
      "--toolkit-includes: no {} compiler library was found to take the toolkit's headers from", to_string(v)));
}

}  // namespace kiln::detail
