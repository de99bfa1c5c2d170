#include "tessera/comm/base/work.h"

namespace tessera::comm {

void Work::wait() {
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

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
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
