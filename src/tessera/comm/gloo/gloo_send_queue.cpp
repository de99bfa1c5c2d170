#include "tessera/comm/gloo/gloo_send_queue.h"

#include <gloo/transport/unbound_buffer.h>

#include "tessera/core/check.h"

namespace tessera::comm {

GlooSendQueue::GlooSendQueue(std::chrono::milliseconds timeout)
    : timeout_(timeout), thread_([this] { run(); }) {}

GlooSendQueue::~GlooSendQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GlooSendQueue::add(std::unique_ptr<::gloo::transport::UnboundBuffer> buffer,
                        at::Tensor staging, int dst) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Entry{std::move(buffer), std::move(staging), dst});
    ++in_flight_;
  }
  cv_.notify_all();
}

void GlooSendQueue::check() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.empty()) return;
  if (error_is_timeout_) TS_THROW(TimeoutError, error_);
  TS_THROW(CommError, error_);
}

void GlooSendQueue::abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    if (current_ != nullptr) current_->abortWaitSend();
  }
  cv_.notify_all();
}

size_t GlooSendQueue::pending() {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

void GlooSendQueue::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || stop_ || aborted_; });
    if (aborted_) {
      in_flight_ -= queue_.size();
      queue_.clear();
      if (stop_) return;
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      continue;
    }
    if (queue_.empty()) return;  // stop_ and drained
    Entry e = std::move(queue_.front());
    queue_.pop_front();
    current_ = e.buffer.get();
    lock.unlock();
    std::string failure;
    bool timeout = false;
    try {
      // Returns false only when aborted; the backend's abort() makes it throw.
      e.buffer->waitSend(timeout_);
    } catch (const std::exception& ex) {
      failure = ex.what();
      timeout = failure.find("Timed out") != std::string::npos;
    }
    lock.lock();
    current_ = nullptr;
    e.buffer.reset();
    --in_flight_;
    if (!failure.empty() && error_.empty()) {
      error_ = c10::str("an earlier gloo send to rank ", e.dst, " failed: ", failure);
      error_is_timeout_ = timeout;
    }
  }
}

}  // namespace tessera::comm
