// SerialExecutor: one background thread running queued tasks in FIFO order.
//
// A ProcessGroup owns three (collectives, sends, receives): order within a queue
// is the order of submission, which is what makes collectives match across ranks.
// Tasks must not throw (the group catches everything and stores it in the Work).
// shutdown() runs no further tasks: the ones still queued get `on_drop` so their
// Work completes with an error instead of waiting forever.
//
// A thread about to block on a result may run the tasks up to it itself
// (run_until): when the background thread is idle this saves two thread
// hand-offs per synchronous operation, which dominate small-message latency on a
// busy host. Tasks still run one at a time and in submission order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace tessera::comm {

class SerialExecutor {
 public:
  struct Task {
    std::function<void()> run;
    std::function<void()> on_drop;  // called instead of run() if never executed
  };

  explicit SerialExecutor(std::string name);
  ~SerialExecutor();  // shutdown() + join

  // Queues `task`; returns its ticket (increasing from 1).
  uint64_t submit(Task task);
  // If no task is running, runs queued tasks on the calling thread, in order, up
  // to and including `ticket`; returns as soon as it cannot (the background
  // thread holds one) or nothing up to `ticket` is left.
  void run_until(uint64_t ticket);
  // Drops queued tasks, waits for the running task and joins the thread.
  void shutdown();

 private:
  void loop();
  // Runs the first queued task with mu_ released; `lock` holds mu_ on entry and exit.
  void run_front(std::unique_lock<std::mutex>& lock);

  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Queued {
    uint64_t ticket;
    Task task;
  };
  std::deque<Queued> queue_;
  uint64_t last_ticket_ = 0;
  bool busy_ = false;  // a task is running (on the background or a caller's thread)
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::comm
