#include "tessera/comm/mpi/mpi_send_queue.h"

namespace tessera::comm::mpi {

MpiSendQueue::~MpiSendQueue() { abort(); }

void MpiSendQueue::add(MPI_Request request, at::Tensor staging, std::string what) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back({request, std::move(staging), std::move(what),
                      std::chrono::steady_clock::now() + timeout_});
  if (!thread_.joinable() && !stop_) thread_ = std::thread([this] { loop(); });
  cv_.notify_all();
}

void MpiSendQueue::check() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

bool MpiSendQueue::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_.empty() || error_ || stop_; });
  return pending_.empty() && !error_;
}

void MpiSendQueue::abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.empty() || finalized()) return;
  auto* leaked = new std::deque<Pending>();  // MPI may still read these buffers
  for (auto& p : pending_) {
    auto mpi_lock = call_lock();
    MPI_Cancel(&p.request);
    MPI_Request_free(&p.request);
    leaked->push_back(std::move(p));
  }
  pending_.clear();
}

bool MpiSendQueue::poll_once() {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    int done = 0, rc = 0;
    {
      auto mpi_lock = call_lock();
      rc = MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS && !error_) {
      error_ = std::make_exception_ptr(
          CommError(c10::str("backend mpi: ", p.what, " failed: ", error_string(rc))));
    } else if (!done) {
      if (std::chrono::steady_clock::now() < p.deadline) return false;
      if (!error_) {
        error_ = std::make_exception_ptr(TimeoutError(c10::str(
            "backend mpi: ", p.what, " was not received within ",
            std::chrono::duration<double>(timeout_).count(),
            " s; check that the peer posts the matching recv")));
      }
      return false;
    }
    pending_.pop_front();
  }
  return true;
}

void MpiSendQueue::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    bool empty = poll_once();
    if (empty || error_) cv_.notify_all();
    if (error_) {
      // Keep the failed sends (and their buffers) for abort(); stop polling.
      cv_.wait(lock, [&] { return stop_; });
      break;
    }
    if (empty) {
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    } else {
      // Sends in flight: poll again soon, without holding the lock meanwhile.
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      lock.lock();
    }
  }
}

}  // namespace tessera::comm::mpi
