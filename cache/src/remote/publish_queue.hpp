#pragma once
// Private to cache/: the queue of writes both backends' publishers keep (the Redis tier's Publisher, the
// HTTP tier's own thread). publish() must not delay its caller, so it only queues a copy; one background
// thread writes the queue in order. Bounded in jobs and bytes (RemoteConfig::publish_queue_entries and
// publish_queue_bytes): when the server is slower than the compiles, jobs are dropped rather than held.
// Entries and dependency manifests share it. Guarded by its owner's mutex (which guards more of the
// owner's state): push() takes it, every other member expects it held.
#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "kiln/base/hash.hpp"
#include "kiln/cache/remote.hpp"
#include "remote_mac.hpp"

namespace kiln::cache::detail {

struct PublishJob {
  Hash128 key;  ///< the entry's key, or manifest_object_key() of a manifest's request key
  std::vector<std::byte> bytes;
  RemoteValue what = RemoteValue::entry;
};

class PublishQueue {
 public:
  /// `config` is borrowed and must outlive the queue.
  explicit PublishQueue(const RemoteConfig& config) noexcept : m_config(config) {}

  /// Queues a job whose bytes `make` returns. `make` runs only once the queue has room, with `mutex`
  /// not held (a full queue costs the caller no copy); `wake` is notified. False when the queue is full
  /// or closed. Throws what `make` throws.
  template <class Make>
  bool push(std::mutex& mutex, std::condition_variable& wake, const Hash128& key, RemoteValue what, const Make& make) {
    {
      const std::lock_guard lock(mutex);
      if (!has_room(0)) return false;
    }
    std::vector<std::byte> bytes = make();
    const std::lock_guard lock(mutex);
    if (!has_room(bytes.size())) return false;
    m_bytes += bytes.size();
    m_jobs.push_back(PublishJob{key, std::move(bytes), what});
    wake.notify_all();
    return true;
  }

  [[nodiscard]] bool empty() const noexcept { return m_jobs.empty(); }
  /// The oldest job, taken out (not empty()).
  PublishJob pop() {
    PublishJob job = std::move(m_jobs.front());
    m_jobs.pop_front();
    m_bytes -= job.bytes.size();
    return job;
  }
  /// Empties the queue; returns how many of the jobs were entries (their publishers count them dropped).
  std::uint64_t clear() noexcept {
    const auto entries = std::count_if(m_jobs.begin(), m_jobs.end(),
                                       [](const PublishJob& job) { return job.what == RemoteValue::entry; });
    m_jobs.clear();
    m_bytes = 0;
    return static_cast<std::uint64_t>(entries);
  }
  /// Refuses further jobs.
  void close() noexcept { m_closed = true; }
  [[nodiscard]] bool closed() const noexcept { return m_closed; }

 private:
  [[nodiscard]] bool has_room(std::size_t bytes) const noexcept {
    return !m_closed && m_jobs.size() < m_config.publish_queue_entries &&
           m_bytes + bytes <= m_config.publish_queue_bytes;
  }

  const RemoteConfig& m_config;
  std::deque<PublishJob> m_jobs;
  std::uint64_t m_bytes = 0;
  bool m_closed = false;
};

}  // namespace kiln::cache::detail
