#include "tessera/comm/base/work.h"

#include "tessera/core/trace.h"
#include "tessera/core/worker_heartbeat.h"

namespace tessera::comm {

Work::Work(std::string description) : description_(std::move(description)), enqueued_ns_(now_ns()) {}

int64_t Work::now_ns() { return trace::now_ns(); }

void Work::mark_started() {
  int64_t expected = 0;
  started_ns_.compare_exchange_strong(expected, now_ns());
}

WorkTimes Work::times_ns() const {
  WorkTimes t;
  t.enqueued_ns = enqueued_ns_;
  t.started_ns = started_ns_.load();
  std::lock_guard<std::mutex> lock(mu_);
  t.finished_ns = finished_ns_;
  return t;
}

void Work::wait() {
  // Waiting for other ranks is not a hang of this worker (core/worker_heartbeat.h).
  heartbeat::Waiting waiting(description_.c_str());
  if (wait_hook_ && !is_completed()) wait_hook_();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool Work::is_success() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && !error_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void Work::finish(std::exception_ptr error, int64_t finished_ns) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    finished_ns_ = finished_ns != 0 ? finished_ns : now_ns();
    int64_t expected = 0;  // an op that never ran (cancelled, dropped) spans no time
    started_ns_.compare_exchange_strong(expected, finished_ns_);
    error_ = std::move(error);
  }
  cv_.notify_all();
}

std::shared_ptr<Work> Work::completed(std::string description) {
  auto w = std::make_shared<Work>(std::move(description));
  w->finish();
  return w;
}

}  // namespace tessera::comm
