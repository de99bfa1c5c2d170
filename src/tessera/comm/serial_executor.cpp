#include "tessera/comm/serial_executor.h"

#include <pthread.h>
#include <sched.h>

namespace tessera::comm {

SerialExecutor::SerialExecutor(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] {
    // SCHED_BATCH: a woken executor does not preempt the thread that woke it.
    // Otherwise the wake-up on submit() lands on the submitter's CPU and stops
    // it just before it would run the op itself in wait() (run_until), which
    // doubled small-message latency on a busy host. The thread still gets its
    // fair share of CPU, so ops nobody waits for make progress as before.
    // Best effort: failure leaves the default policy.
    sched_param param{};
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
    loop();
  });
  // Thread names show up in gdb and top; Linux limits them to 15 characters.
  pthread_setname_np(thread_.native_handle(), name_.substr(0, 15).c_str());
}

SerialExecutor::~SerialExecutor() { shutdown(); }

uint64_t SerialExecutor::submit(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      const uint64_t ticket = ++last_ticket_;
      queue_.push_back({ticket, std::move(task)});
      cv_.notify_all();
      return ticket;
    }
  }
  if (task.on_drop) task.on_drop();
  return 0;
}

void SerialExecutor::run_front(std::unique_lock<std::mutex>& lock) {
  Task task = std::move(queue_.front().task);
  queue_.pop_front();
  busy_ = true;
  lock.unlock();
  task.run();
  lock.lock();
  busy_ = false;
  cv_.notify_all();
}

void SerialExecutor::run_until(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!busy_ && !stopping_ && !queue_.empty() && queue_.front().ticket <= ticket) {
    run_front(lock);
  }
}

void SerialExecutor::shutdown() {
  std::deque<Queued> dropped;
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
    cv_.notify_all();
    // A task a caller runs inline finishes before the executor goes away.
    if (thread_.get_id() != std::this_thread::get_id()) cv_.wait(lock, [&] { return !busy_; });
  }
  for (auto& q : dropped) {
    if (q.task.on_drop) q.task.on_drop();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void SerialExecutor::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !busy_); });
    if (stopping_) return;
    run_front(lock);
  }
}

}  // namespace tessera::comm
