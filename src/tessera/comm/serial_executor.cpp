#include "tessera/comm/serial_executor.h"

#include <pthread.h>

namespace tessera::comm {

SerialExecutor::SerialExecutor(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { loop(); });
  // Thread names show up in gdb and top; Linux limits them to 15 characters.
  pthread_setname_np(thread_.native_handle(), name_.substr(0, 15).c_str());
}

SerialExecutor::~SerialExecutor() { shutdown(); }

void SerialExecutor::submit(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      queue_.push_back(std::move(task));
      cv_.notify_one();
      return;
    }
  }
  if (task.on_drop) task.on_drop();
}

void SerialExecutor::shutdown() {
  std::deque<Task> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& t : dropped) {
    if (t.on_drop) t.on_drop();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void SerialExecutor::loop() {
  while (true) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task.run();
  }
}

}  // namespace tessera::comm
