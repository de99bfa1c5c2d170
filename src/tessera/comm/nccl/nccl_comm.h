// NcclComm: one NCCL communicator with its own CUDA stream and events, and the
// bounded waits that keep a dead or absent peer from hanging the process.
//
// Communicators are created non-blocking (ncclConfig_t.blocking = 0): creation
// and every call return at once and are polled with ncclCommGetAsyncError, so
// no NCCL call can block this thread past the deadline it is given. On timeout,
// an asynchronous NCCL error or an abort request, the communicator is aborted
// (ncclCommAbort) and stays unusable; the caller's error names what it waited
// for. Internal (comm/nccl/ is built only with TESSERA_WITH_NCCL).
//
// Thread safety: one thread at a time per communicator, except request_abort(),
// which any thread may call.
#pragma once

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace tessera::comm::nccl {

using Clock = std::chrono::steady_clock;

// Throws CommError naming `what` and the CUDA error unless `status` is cudaSuccess.
void check_cuda(cudaError_t status, const std::string& what);

class NcclComm {
 public:
  // Collective over `nranks` processes that share `id`: joins the communicator
  // as `rank` on CUDA `device`. TimeoutError if not every rank joins by `deadline`.
  NcclComm(const ncclUniqueId& id, int nranks, int rank, c10::DeviceIndex device,
           Clock::time_point deadline, const std::atomic<bool>* abort_flag);
  // Finalizes (flushes) and destroys a healthy communicator within a few
  // seconds; aborts one that failed or does not finalize in time.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  c10::DeviceIndex device() const { return device_; }
  const c10::cuda::CUDAStream& stream() const { return stream_; }
  bool failed() const { return failed_; }

  // Makes this communicator's stream wait for the work queued so far on `caller`.
  void wait_for(cudaStream_t caller);
  // Records the end of the queued op on this stream and makes `caller` wait for it.
  void finish_on(cudaStream_t caller);
  // Checks the result of an NCCL call on this communicator; ncclInProgress is
  // polled out (non-blocking mode). CommError naming `what` on failure.
  void check(ncclResult_t result, const std::string& what, Clock::time_point deadline);
  // Blocks until the op recorded by finish_on() has completed on the GPU; polls
  // NCCL's asynchronous error, the abort flag and the deadline meanwhile.
  void wait_done(const std::string& what, Clock::time_point deadline);
  // Aborts the communicator now (idempotent); later calls fail fast.
  void abort();

 private:
  // Polls until the communicator leaves ncclInProgress; throws like wait_done().
  void wait_ready(const std::string& what, Clock::time_point deadline);
  [[noreturn]] void fail(const std::string& what, const std::string& why, bool timed_out);

  ncclComm_t comm_ = nullptr;
  c10::DeviceIndex device_;
  // A stream of its own, not one of LibTorch's pooled ones: a pooled stream may
  // be handed to other code (or another communicator), whose work would then
  // queue behind a transfer waiting for a peer.
  cudaStream_t raw_stream_ = nullptr;
  c10::cuda::CUDAStream stream_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t end_ = nullptr;
  const std::atomic<bool>* abort_flag_;
  bool failed_ = false;
  bool aborted_ = false;
};

// Waits out one bounded poll step: spins briefly, then sleeps up to 1 ms, so a
// fast op costs microseconds and a slow one little CPU. `round` counts from 0.
void poll_pause(int round);

}  // namespace tessera::comm::nccl
