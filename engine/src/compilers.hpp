#pragma once
// The engine's compilers, one lane per vendor (compilers.cpp): shared with engine.cpp, which makes them.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiler_probe.hpp"
#include "engine_internal.hpp"
#include "lanes/lane.hpp"

namespace kiln::detail {

/// One vendor's compiler. What a request needs (identity, targets) comes from a probe when one still
/// describes the library on disk; the compiler itself is loaded only to compile (or to report).
struct EngineCore::Lane {
  Vendor vendor;
  std::once_flag probe_once;
  std::mutex facts_mutex;                      // facts are replaced if a loaded compiler disagrees
  std::shared_ptr<const CompilerFacts> facts;  // null: no compiler (see error)
  std::once_flag load_once;
  std::atomic<bool> load_tried{false};  // set when load_once's call returned (compiler or error set)
  std::unique_ptr<vendor::Compiler> compiler;
  std::string error;

  [[nodiscard]] std::vector<std::string> search_list() const {
    return vendor == Vendor::cuda ? vendor::nvrtc_search_list() : vendor::hiprtc_search_list();
  }
};

}  // namespace kiln::detail
