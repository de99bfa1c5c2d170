// SerialExecutor: one background thread running queued tasks in FIFO order.
//
// A ProcessGroup owns three (collectives, sends, receives): order within a queue
// is the order of submission, which is what makes collectives match across ranks.
// Tasks must not throw (the group catches everything and stores it in the Work).
// shutdown() runs no further tasks: the ones still queued get `on_drop` so their
// Work completes with an error instead of waiting forever.
#pragma once

#include <condition_variable>
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

  void submit(Task task);
  // Drops queued tasks and joins the thread (waits for the running task).
  void shutdown();

 private:
  void loop();

  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::comm
