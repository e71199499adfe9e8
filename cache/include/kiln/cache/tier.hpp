#pragma once
// A read-through tier consulted after the local store and before compiling: mounted packs
// (KILN_CACHE_PACKS) and the remote tier (KILN_REMOTE_CACHE). The storage front end (storage.hpp) asks
// tiers in order; a hit is verified like a local entry and copied into the local store. After a compile,
// publish() is offered to every tier (a tier may ignore it: packs are read-only).
#include <string>
#include <string_view>

#include "kiln/cache/entry.hpp"
#include "kiln/base/hash.hpp"
#include "kiln/cache/lookup.hpp"

namespace kiln::cache {

class Tier {
 public:
  virtual ~Tier() = default;
  /// "pack /x/app.kpack", "redis 127.0.0.1:6379/0".
  [[nodiscard]] virtual std::string describe() const = 0;
  /// Looks a key up and verifies the bytes (parse() + canonical key comparison). Never throws; a
  /// failing tier answers miss or io_error and never fails the request.
  [[nodiscard]] virtual LookupResult get(const Hash128& key, std::string_view canonical_key) = 0;
  /// Offered every freshly compiled entry. Must not delay the caller noticeably; never throws.
  virtual void publish(const Entry& /*entry*/) noexcept {}
  /// The compile that followed a miss of this tier failed (a tier that took a fleet-wide compile
  /// lease in get() releases it here). Never throws.
  virtual void abandon(const Hash128& /*key*/) noexcept {}
};

}  // namespace kiln::cache
