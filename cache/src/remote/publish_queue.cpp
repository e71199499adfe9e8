// The background publisher both remote backends use (publish_queue.hpp).
#include "publish_queue.hpp"

namespace kiln::cache::detail {

PublishThread::PublishThread(const RemoteConfig& config, Writer& writer)
    : m_config(config), m_writer(writer), m_queue(config), m_thread([this] { run(); }) {}

PublishThread::~PublishThread() { close(Clock::now() + m_config.close_flush); }

void PublishThread::close(Clock::time_point deadline) noexcept {
  try {
    {
      const std::lock_guard lock(m_mutex);
      if (!m_queue.closed()) {
        m_queue.close();
        m_close_deadline = deadline;
      }
    }
    m_wake.notify_all();
    // One caller joins; another that comes meanwhile (the destructor after Storage::close_tiers) finds
    // the thread joined.
    const std::lock_guard join_lock(m_join_mutex);
    if (m_thread.joinable()) m_thread.join();
  } catch (...) {  // std::system_error from a mutex or the join: what is queued is lost (leases expire)
  }
}

bool PublishThread::closed() const noexcept {
  try {
    const std::lock_guard lock(m_mutex);
    return m_queue.closed();
  } catch (...) {
    return true;
  }
}

void PublishThread::wake() noexcept {
  try {
    const std::lock_guard lock(m_mutex);
    m_wake.notify_all();
  } catch (...) {  // std::system_error from the mutex: the chores run when next due
  }
}

bool PublishThread::wait_idle(std::chrono::milliseconds max_wait) noexcept {
  try {
    std::unique_lock lock(m_mutex);
    return m_idle.wait_for(lock, max_wait, [this] { return m_queue.empty() && !m_writing; });
  } catch (...) {
    return false;
  }
}

void PublishThread::run() noexcept {
  std::unique_lock lock(m_mutex);
  for (;;) {
    if (!m_queue.empty() && !(m_queue.closed() && Clock::now() >= m_close_deadline)) {
      PublishJob job = m_queue.pop();
      m_writing = true;
      lock.unlock();
      m_writer.write_job(job);
      lock.lock();
      m_writing = false;
      if (m_queue.empty()) m_idle.notify_all();
      continue;
    }
    if (m_queue.closed()) break;
    if (m_writer.chores_due()) {
      lock.unlock();
      m_writer.chores();
      lock.lock();
      continue;
    }
    // wait_until(time_point::max()) overflows inside some standard libraries: sleep until woken instead.
    const Clock::time_point next = m_writer.next_chores();
    if (next == Clock::time_point::max()) {
      m_wake.wait(lock);
    } else {
      m_wake.wait_until(lock, next);
    }
  }
  // Closing: drop what could not be written in time, then the writer's last chores (free its leases).
  count_dropped(m_queue.clear());
  m_idle.notify_all();
  lock.unlock();
  m_writer.on_close();
}

}  // namespace kiln::cache::detail
