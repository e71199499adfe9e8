// The shell every remote backend shares (remote_base.hpp).
#include "remote_base.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "kiln/base/log.hpp"

namespace kiln::cache::detail {

namespace {

void add_max(std::atomic<std::uint64_t>& target, std::uint64_t value) noexcept {
  std::uint64_t current = target.load(std::memory_order_relaxed);
  while (value > current && !target.compare_exchange_weak(current, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

void set_detail(std::string* detail, std::string_view text) noexcept {
  if (detail == nullptr) return;
  try {
    detail->assign(text);
  } catch (...) {
  }
}

RemoteTierBase::RemoteTierBase(RemoteConfig config)
    : m_config(std::move(config)),
      m_display(m_config.display()),
      m_breaker(fmt::format("remote cache {}", m_display), m_config.retry_after) {}

std::string RemoteTierBase::describe() const {
  return fmt::format("{} {}", backend(), std::string_view(m_display).substr(m_display.find("://") + 3));
}

Counters RemoteTierBase::counters() const noexcept {
  Counters counters;
  counters.remote_hits = m_hits.load(std::memory_order_relaxed);
  counters.remote_misses = m_misses.load(std::memory_order_relaxed);
  counters.remote_errors = m_errors.load(std::memory_order_relaxed);
  counters.remote_unauthenticated = m_unauthenticated.load(std::memory_order_relaxed);
  return counters;
}

RemoteStats RemoteTierBase::remote_stats() const noexcept {
  RemoteStats s;
  s.hits = m_hits.load();
  s.misses = m_misses.load();
  s.failures = m_breaker.failures();
  s.skipped = m_breaker.skipped();
  s.rejected = m_rejected.load();
  s.unauthenticated = m_unauthenticated.load();
  m_manifests.report(s);
  s.get_nanoseconds = m_get_ns.load();
  s.get_max_nanoseconds = m_get_max_ns.load();
  add_stats(s);
  return s;
}

LookupResult RemoteTierBase::get(const Hash128& key, std::string_view canonical_key) {
  const auto start = std::chrono::steady_clock::now();
  LookupResult result;
  bool refused_unauthenticated = false;
  try {
    result = lookup(key, canonical_key, refused_unauthenticated);
  } catch (...) {  // std::bad_alloc: answer io_error, never fail the request
    result.outcome = LookupOutcome::io_error;
    result.entry.reset();
    result.detail.clear();
  }
  switch (result.outcome) {
    case LookupOutcome::hit:
      m_hits.fetch_add(1, std::memory_order_relaxed);
      break;
    case LookupOutcome::miss:
      m_misses.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      // An entry refused for its MAC is counted once, as remote_unauthenticated: it is not the server
      // failing.
      if (!refused_unauthenticated) m_errors.fetch_add(1, std::memory_order_relaxed);
      break;
  }
  const auto elapsed = static_cast<std::uint64_t>(std::max<std::int64_t>(
      0, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count()));
  m_get_ns.fetch_add(elapsed, std::memory_order_relaxed);
  add_max(m_get_max_ns, elapsed);
  return result;
}

ManifestFetch RemoteTierBase::get_manifest(const Hash128& request_key, const ManifestCheck& check) noexcept {
  return counted_manifest_fetch(m_manifests, [&] { return fetch_manifest(request_key, check); });
}

std::string RemoteTierBase::not_asked() const {
  return fmt::format("not asked: it failed less than {} s ago", m_config.retry_after.count());
}

LookupResult RemoteTierBase::rejected(std::string_view where, std::string_view why, bool deleted) {
  KILN_LOG(warn, "remote cache {}: rejected {} ({}); {} it, compiling instead", m_display, where, why,
           deleted ? "deleted" : "could not delete");
  return rejected_quietly(why);
}

LookupResult RemoteTierBase::rejected_quietly(std::string_view why) {
  m_rejected.fetch_add(1, std::memory_order_relaxed);
  return {LookupOutcome::corrupt_removed, std::nullopt, fmt::format("remote cache {}: {}", m_display, why)};
}

LookupResult RemoteTierBase::unauthenticated(std::string_view where, const Hash128& key, bool had_mac, bool deleted,
                                             bool& refused_unauthenticated) {
  m_rejected.fetch_add(1, std::memory_order_relaxed);
  m_unauthenticated.fetch_add(1, std::memory_order_relaxed);
  refused_unauthenticated = true;
  const std::string why = had_mac ? "its MAC is wrong (written under another secret, or planted)"
                                  : "it has no MAC (written by a node without KILN_REMOTE_SECRET_FILE, or planted)";
  if (!m_warned_unauthenticated.exchange(true)) {
    KILN_LOG(warn,
             "remote cache {}: refused {}: {}; {} it, compiling instead (this process counts further refusals as "
             "remote_unauthenticated and does not print them)",
             m_display, where, why, deleted ? "deleted" : "could not delete");
  } else {
    KILN_LOG(debug, "remote cache {}: refused the entry {}: {}", m_display, key.hex(), why);
  }
  return {LookupOutcome::corrupt_removed, std::nullopt,
          fmt::format("remote cache {}: refused the entry: {}", m_display, why)};
}

ManifestFetch RemoteTierBase::refused_manifest(std::string_view where, std::string_view why, bool deleted) noexcept {
  return m_manifests.refuse(m_display, where, why, deleted);
}

}  // namespace kiln::cache::detail
