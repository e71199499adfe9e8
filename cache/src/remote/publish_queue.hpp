#pragma once
// Private to cache/: the queue of writes both backends' publishers keep (the Redis tier's Publisher, the
// HTTP tier's own thread). publish() must not delay its caller, so it only queues a copy; one background
// thread writes the queue in order. Bounded in jobs and bytes (RemoteConfig::publish_queue_entries and
// publish_queue_bytes): when the server is slower than the compiles, jobs are dropped rather than held.
// Entries and dependency manifests share it. Guarded by its owner's mutex (which guards more of the
// owner's state): push() takes it, every other member expects it held.
// PublishThread (below) is that owner for both backends: the queue, its one thread, flush and close;
// a backend gives it only how one job is written (and the Redis tier its leases' upkeep).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
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

/// A backend's background publisher: a PublishQueue and the one thread that writes it in order. Both
/// backends had the same thread, flush and close; what differs is how a job is written (Writer) and, for
/// the Redis tier, chores between jobs (renewing and releasing compile leases).
class PublishThread {
 public:
  using Clock = std::chrono::steady_clock;

  /// What the thread calls, never with the queue's lock held. Must outlive the PublishThread's close().
  class Writer {
   public:
    /// Writes one job, or counts it dropped (the breaker is open). Never throws.
    virtual void write_job(PublishJob& job) noexcept = 0;
    /// Whether chores are due now (called with the lock held, right before the thread would sleep: a
    /// request for chores must notify under the lock, see PublishThread::wake()).
    [[nodiscard]] virtual bool chores_due() noexcept { return false; }
    /// Does them. Never throws.
    virtual void chores() noexcept {}
    /// When chores are next due on their own (Clock::time_point::max(): never; the thread then sleeps
    /// until woken).
    [[nodiscard]] virtual Clock::time_point next_chores() noexcept { return Clock::time_point::max(); }
    /// After close(): the queue is emptied, nothing more is written. Never throws.
    virtual void on_close() noexcept {}

   protected:
    ~Writer() = default;
  };

  /// `config` (publish_queue_entries, publish_queue_bytes, close_flush) and `writer` are borrowed and
  /// must outlive this. Starts the thread: construct it last, after everything `writer` uses.
  PublishThread(const RemoteConfig& config, Writer& writer);
  /// close() with a deadline of close_flush from now.
  ~PublishThread();
  PublishThread(const PublishThread&) = delete;
  PublishThread& operator=(const PublishThread&) = delete;

  /// PublishQueue::push under this thread's lock: queues the bytes `make` returns, false when the queue
  /// is full or closed. Throws what `make` throws.
  template <class Make>
  bool push(const Hash128& key, RemoteValue what, const Make& make) {
    return m_queue.push(m_mutex, m_wake, key, what, make);
  }
  /// Wakes the thread for chores (under the lock, so a request made between the thread's last check and
  /// its sleep is not lost). Never throws.
  void wake() noexcept;
  /// Waits until the queue is empty and nothing is being written, at most `max_wait`. Never throws.
  bool wait_idle(std::chrono::milliseconds max_wait) noexcept;
  /// Takes no more jobs, writes what is queued until `deadline`, drops the rest (counted), calls
  /// Writer::on_close() and stops the thread. Idempotent (a later call keeps the first deadline). Never
  /// throws.
  void close(Clock::time_point deadline) noexcept;
  /// Whether close() has begun.
  [[nodiscard]] bool closed() const noexcept;

  /// Entries written, and entries not written (queue full, breaker open, server failed, closed): the
  /// Writer counts each write it makes or fails.
  void count_published() noexcept { m_published.fetch_add(1, std::memory_order_relaxed); }
  void count_dropped(std::uint64_t count = 1) noexcept { m_dropped.fetch_add(count, std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t published() const noexcept { return m_published.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t dropped() const noexcept { return m_dropped.load(std::memory_order_relaxed); }

 private:
  void run() noexcept;

  const RemoteConfig& m_config;
  Writer& m_writer;
  std::atomic<std::uint64_t> m_published{0};
  std::atomic<std::uint64_t> m_dropped{0};

  mutable std::mutex m_mutex;  ///< guards the queue and the thread's state
  std::condition_variable m_wake;
  std::condition_variable m_idle;
  PublishQueue m_queue;
  bool m_writing = false;
  Clock::time_point m_close_deadline{};

  std::mutex m_join_mutex;  ///< one close() joins the thread
  std::thread m_thread;     ///< last: starts after every member above exists
};

}  // namespace kiln::cache::detail
