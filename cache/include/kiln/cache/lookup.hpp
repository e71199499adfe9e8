#pragma once
// The answer of one lookup, shared by the local store and every read-through tier (tier.hpp): a hit
// carries the verified entry; anything else says why there is none.
#include <cstdint>
#include <optional>
#include <string>

#include "kiln/cache/entry.hpp"

namespace kiln::cache {

enum class LookupOutcome : std::uint8_t {
  hit,
  miss,             ///< no file
  corrupt_removed,  ///< content error: the file was deleted
  io_error,         ///< could not read: nothing deleted
  disabled,         ///< memory-only store
};

struct LookupResult {
  LookupOutcome outcome = LookupOutcome::miss;
  std::optional<Entry> entry;  ///< set on hit
  std::string detail;          ///< why, for corrupt_removed / io_error
};

}  // namespace kiln::cache
