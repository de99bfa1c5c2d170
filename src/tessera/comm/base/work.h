// Work: the handle of an asynchronous communication operation.
//
// A ProcessGroup returns a Work for every operation it queues. The operation runs
// on the group's background thread; the user's thread calls wait(). Background
// threads never throw across threads: a failure is stored as an exception_ptr in
// the Work and wait() rethrows it (CommError, TimeoutError, ...).
//
// Every Work records when it was queued, when its queue started it and when it
// finished, on the steady clock (times_ns()), so a timeline or a test can see when
// an operation really ran, not only when it was asked for.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace tessera::comm {

// Nanoseconds on the steady clock (CLOCK_MONOTONIC: one clock for every process of
// a host); 0 for a point not reached yet.
struct WorkTimes {
  int64_t enqueued_ns = 0;
  int64_t started_ns = 0;
  int64_t finished_ns = 0;
};

class Work {
 public:
  // Records the enqueue time.
  explicit Work(std::string description = "");

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

  // When the operation was queued, started and finished.
  WorkTimes times_ns() const;
  // The steady clock Work uses, in nanoseconds.
  static int64_t now_ns();

  // Called by the executor when the operation begins to run (the first call counts).
  void mark_started();
  // Called by the executor exactly once; records `finished_ns` as the finish time
  // (0: now).
  void finish(std::exception_ptr error = nullptr, int64_t finished_ns = 0);
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
  int64_t enqueued_ns_ = 0;
  std::atomic<int64_t> started_ns_{0};
  int64_t finished_ns_ = 0;  // guarded by mu_
  std::exception_ptr error_;
};

using WorkHandle = std::shared_ptr<Work>;

}  // namespace tessera::comm
