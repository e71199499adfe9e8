#pragma once
// Test-only: reaches an Engine's internal state (its EngineCore) for tests and benchmarks that need
// to look below the public API (the remote tier's own statistics, a flush). User code has no such
// access: the public header only names this struct as a friend.
#include "engine_internal.hpp"
#include "kiln/engine.hpp"

namespace kiln::detail {

struct EngineAccess {
  static EngineCore& core(Engine& engine) noexcept { return *engine.m_core; }
};

}  // namespace kiln::detail
