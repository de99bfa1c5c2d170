// Work: the handle of an asynchronous communication operation.
//
// A ProcessGroup returns a Work for every operation it queues. The operation runs
// on the group's background thread; the user's thread calls wait(). Background
// threads never throw across threads: a failure is stored as an exception_ptr in
// the Work and wait() rethrows it (CommError, TimeoutError, ...).
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace tessera::comm {

class Work {
 public:
  explicit Work(std::string description = "") : description_(std::move(description)) {}

  // Blocks until the operation finished. Rethrows its error, if any. Never blocks
  // past the group's timeout: the operation itself fails with TimeoutError first.
  void wait();

  // Non-blocking: true once the operation finished (successfully or not).
  bool is_completed() const;
  // True once finished without an error.
  bool is_success() const;
  // The stored error, or nullptr.
  std::exception_ptr exception() const;

  // What the operation is, e.g. "all_reduce #12 in group 'default'".
  const std::string& description() const { return description_; }

  // Called by the executor exactly once.
  void finish(std::exception_ptr error = nullptr);
  // Optional: wait() calls `hook` once before blocking, so the queue holding this
  // operation can run it on the waiting thread (SerialExecutor::run_until).
  void set_wait_hook(std::function<void()> hook) { wait_hook_ = std::move(hook); }

  // A Work that is already complete (e.g. an op on a group of size 1).
  static std::shared_ptr<Work> completed(std::string description = "");

 private:
  std::string description_;
  std::function<void()> wait_hook_;  // set before the Work is handed out
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

using WorkHandle = std::shared_ptr<Work>;

}  // namespace tessera::comm
