// GlooSendQueue: completes the gloo backend's point-to-point sends in the background.
//
// Gloo's TCP transport only moves a send's bytes once the receiver has posted the
// matching recv. Backend::send() must not wait for that (an exchange where both
// ranks send first, then receive, would deadlock), so the backend copies the data
// into a staging tensor, posts the send and hands both to this queue. One reaper
// thread waits for the sends in posting order and then frees their memory.
//
// A send that fails (peer gone, or not received within the timeout) is recorded;
// the next send or recv of the backend rethrows it through check().
// Destruction waits for posted sends to be delivered (each within its timeout)
// unless abort() was called. Thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace gloo::transport {
class UnboundBuffer;
}

namespace tessera::comm {

class GlooSendQueue {
 public:
  explicit GlooSendQueue(std::chrono::milliseconds timeout);
  ~GlooSendQueue();
  GlooSendQueue(const GlooSendQueue&) = delete;
  GlooSendQueue& operator=(const GlooSendQueue&) = delete;

  // Takes a send already posted on `buffer` (which views `staging`) to rank dst.
  // Non-blocking.
  void add(std::unique_ptr<::gloo::transport::UnboundBuffer> buffer, at::Tensor staging,
           int dst);

  // Throws CommError/TimeoutError if an earlier send failed.
  void check();

  // Stops waiting: pending sends are dropped. Non-blocking.
  void abort();

  // Number of sends posted but not yet delivered (for tests).
  size_t pending();

 private:
  struct Entry {
    std::unique_ptr<::gloo::transport::UnboundBuffer> buffer;
    at::Tensor staging;
    int dst = -1;
  };
  void run();

  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  size_t in_flight_ = 0;  // queued plus the one being waited for
  ::gloo::transport::UnboundBuffer* current_ = nullptr;  // being waited for
  bool stop_ = false;
  bool aborted_ = false;
  std::string error_;  // first failure, "" if none
  bool error_is_timeout_ = false;
  std::thread thread_;
};

}  // namespace tessera::comm
