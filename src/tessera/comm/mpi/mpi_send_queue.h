// MpiSendQueue: completes the mpi backend's point-to-point sends in the background.
//
// Above MPI's eager limit (4 KiB over shared memory in Open MPI) a send only
// finishes once the receiver has posted the matching receive. Backend::send()
// must not wait for that: with tags, a receiver may take tag 2 before tag 1 while
// the sender's queue sends tag 1 first. So the backend copies the data into a
// staging tensor, posts MPI_Isend and hands request and staging to this queue,
// whose thread polls the requests (driving MPI's progress while the caller
// computes) and frees each staging tensor once its send completed.
//
// A send that fails or is not received within the timeout is recorded; check()
// rethrows it on the backend's next send or recv. drain() waits for every posted
// send (each within its timeout); abort() stops polling without waiting.
// Internal to comm/mpi/ (includes <mpi.h> through mpi_runtime.h). Thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "tessera/comm/mpi/mpi_runtime.h"

namespace tessera::comm::mpi {

class MpiSendQueue {
 public:
  explicit MpiSendQueue(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  ~MpiSendQueue();  // abort()s if drain() was not called
  MpiSendQueue(const MpiSendQueue&) = delete;
  MpiSendQueue& operator=(const MpiSendQueue&) = delete;

  // Takes a posted send; `staging` is its buffer. Non-blocking.
  void add(MPI_Request request, at::Tensor staging, std::string what);
  // Rethrows the first failed send, if any.
  void check();
  // Blocks until every posted send completed or failed. Returns false on failure.
  bool drain();
  // Stops polling; pending requests are cancelled and their buffers leaked (MPI
  // may still read them). Does not block on the network.
  void abort();

 private:
  struct Pending {
    MPI_Request request;
    at::Tensor staging;
    std::string what;
    std::chrono::steady_clock::time_point deadline;
  };
  void loop();
  bool poll_once();  // under mu_; true when the queue is empty

  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tessera::comm::mpi
