#include "tessera/comm/nccl/nccl_comm.h"

#include <c10/cuda/CUDAGuard.h>

#include <thread>

#include "tessera/comm/nccl/nccl_types.h"
#include "tessera/core/check.h"
#include "tessera/core/logging.h"

namespace tessera::comm::nccl {

void check_cuda(cudaError_t status, const std::string& what) {
  if (status == cudaSuccess) return;
  TS_THROW(CommError, what, " failed: CUDA error ", cudaGetErrorName(status), " (",
           cudaGetErrorString(status), ")");
}

void poll_pause(int round) {
  if (round < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(round < 1024 ? 50 : 1000));
  }
}

namespace {
cudaStream_t new_stream(c10::DeviceIndex device) {
  c10::cuda::CUDAGuard guard(device);
  cudaStream_t stream = nullptr;
  // Non-blocking: no implicit ordering with the legacy default stream.
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return stream;
}

double seconds_since(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}
}  // namespace

NcclComm::NcclComm(const ncclUniqueId& id, int nranks, int rank, c10::DeviceIndex device,
                   Clock::time_point deadline, const std::atomic<bool>* abort_flag)
    : device_(device),
      raw_stream_(new_stream(device)),
      stream_(c10::cuda::getStreamFromExternal(raw_stream_, device)),
      abort_flag_(abort_flag) {
  c10::cuda::CUDAGuard guard(device_);
  // Timing off: these events only order streams and report completion.
  check_cuda(cudaEventCreateWithFlags(&start_, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventCreateWithFlags(&end_, cudaEventDisableTiming), "cudaEventCreate");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking: a peer that never joins must become a timeout, not a hang.
  config.blocking = 0;
  ncclResult_t result = ncclCommInitRankConfig(&comm_, nranks, id, rank, &config);
  const std::string what = c10::str("creating the NCCL communicator (rank ", rank, " of ", nranks,
                                    ", cuda:", static_cast<int>(device), ")");
  if (result != ncclSuccess && result != ncclInProgress) {
    failed_ = true;
    TS_THROW(CommError, what, " failed: ", describe_result(result));
  }
  wait_ready(what, deadline);
}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) {
    c10::cuda::CUDAGuard guard(device_);
    if (!failed_ && !aborted_) {
      // Finalize flushes queued work; bounded, since a peer may already be gone.
      try {
        check(ncclCommFinalize(comm_), "finalizing the NCCL communicator",
              Clock::now() + std::chrono::seconds(10));
      } catch (const std::exception& e) {
        TS_LOG(WARN) << e.what();
      }
    }
    if (aborted_) {
      // ncclCommAbort already freed it.
    } else if (failed_) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
    comm_ = nullptr;
  }
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (end_ != nullptr) cudaEventDestroy(end_);
  if (raw_stream_ != nullptr) cudaStreamDestroy(raw_stream_);
}

void NcclComm::abort() {
  if (aborted_ || comm_ == nullptr) return;
  failed_ = true;
  aborted_ = true;
  c10::cuda::CUDAGuard guard(device_);
  ncclResult_t result = ncclCommAbort(comm_);
  if (result != ncclSuccess) {
    TS_LOG(WARN) << "ncclCommAbort: " << describe_result(result);
  }
}

void NcclComm::fail(const std::string& what, const std::string& why, bool timed_out) {
  abort();
  if (timed_out) TS_THROW(TimeoutError, what, ": ", why);
  TS_THROW(CommError, what, ": ", why);
}

void NcclComm::wait_ready(const std::string& what, Clock::time_point deadline) {
  const Clock::time_point start = Clock::now();
  for (int round = 0;; ++round) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) {
      fail(what, "ncclCommGetAsyncError: " + describe_result(result), false);
    }
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) fail(what, describe_result(state), false);
    if (abort_flag_ != nullptr && abort_flag_->load()) fail(what, "the group was aborted", false);
    if (Clock::now() >= deadline) {
      fail(what,
           c10::str("not done after ", seconds_since(start),
                    " s, the group's timeout (TESSERA_TIMEOUT): a rank did not join; "
                    "the NCCL communicator was aborted"),
           true);
    }
    poll_pause(round);
  }
}

void NcclComm::check(ncclResult_t result, const std::string& what, Clock::time_point deadline) {
  TS_CHECK_T(CommError, !failed_, what,
             ": the NCCL communicator was aborted after an earlier error");
  if (result == ncclInProgress) return wait_ready(what, deadline);
  if (result != ncclSuccess) fail(what, describe_result(result), false);
}

void NcclComm::wait_for(cudaStream_t caller) {
  check_cuda(cudaEventRecord(start_, caller), "cudaEventRecord on the caller's stream");
  check_cuda(cudaStreamWaitEvent(stream_.stream(), start_, 0), "cudaStreamWaitEvent");
}

void NcclComm::finish_on(cudaStream_t caller) {
  check_cuda(cudaEventRecord(end_, stream_.stream()), "cudaEventRecord on the NCCL stream");
  check_cuda(cudaStreamWaitEvent(caller, end_, 0), "cudaStreamWaitEvent");
}

void NcclComm::wait_done(const std::string& what, Clock::time_point deadline) {
  const Clock::time_point start = Clock::now();
  for (int round = 0;; ++round) {
    cudaError_t status = cudaEventQuery(end_);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) {
      failed_ = true;
      check_cuda(status, what);
    }
    ncclResult_t state = ncclSuccess;
    ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      fail(what, "NCCL reported " + describe_result(result != ncclSuccess ? result : state), false);
    }
    if (abort_flag_ != nullptr && abort_flag_->load()) fail(what, "the group was aborted", false);
    if (Clock::now() >= deadline) {
      fail(what,
           c10::str("not complete after ", seconds_since(start),
                    " s, the group's timeout (TESSERA_TIMEOUT): a peer is missing or "
                    "stalled; the NCCL communicator was aborted"),
           true);
    }
    poll_pause(round);
  }
}

}  // namespace tessera::comm::nccl
