// NcclBackend: Tessera's Backend for CUDA tensors, on NCCL's C API.
//
// Communicators. One per (group, CUDA device), created lazily by the first op
// on that device: rank 0 calls ncclGetUniqueId and publishes the id in the
// group's store (already prefixed with the group's instance, so groups never
// share keys) under "nccl/comm/<n>", n counting the communicators this group
// made; the others read it. A subgroup is its own ProcessGroup with its own
// store prefix, so it gets a fresh id the same way: ncclCommSplit would need
// every parent rank to take part, and Tessera builds a subgroup on its members
// only (ProcessGroup::new_subgroup). Sends and receives use one extra 2-rank
// communicator per direction (sender -> receiver), created by the first
// transfer, because the group's send and receive threads run concurrently with
// its collective thread and one communicator must be driven by one thread.
// Tags are not carried: transfers between two ranks match in posting order.
//
// Streams. Each communicator owns a CUDA stream. An op makes that stream wait
// for the work queued so far on the caller's current stream (the ProcessGroup
// runs the op under the stream current on the thread that queued it), enqueues
// the NCCL call, then makes the caller's stream wait for the NCCL stream.
//
// Completion and errors. Each op returns once NCCL has finished it on the GPU
// (the Backend contract: blocking), so the tensors the ProcessGroup holds for
// the op stay alive until NCCL is done with them. While waiting it polls the end
// event, ncclCommGetAsyncError and the group's abort flag; past the group's
// timeout (TESSERA_TIMEOUT) it calls ncclCommAbort and throws TimeoutError,
// which the ProcessGroup reports with the op, sequence number and rank. A
// failed communicator stays aborted; the group is broken from then on.
// The destructor finalizes and destroys healthy communicators.
//
// Internal (comm/nccl/ is built only with TESSERA_WITH_NCCL); reach it through
// the registry name "nccl", or "cpu:gloo,cuda:nccl" (device_dispatch_backend.h).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "tessera/comm/base/backend.h"
#include "tessera/comm/nccl/nccl_comm.h"

namespace tessera::comm::nccl {

// CUDA devices this process sees; 0 without a driver or device (never throws).
int cuda_device_count();

class NcclBackend : public Backend {
 public:
  // Creates no communicator yet. ConfigError if this process sees no CUDA device.
  explicit NcclBackend(BackendContext ctx);
  ~NcclBackend() override;

  std::string name() const override { return "nccl"; }
  bool supports_device(c10::DeviceType device) const override {
    return device == c10::DeviceType::CUDA;
  }
  // NCCL reduces half types itself, as every NCCL user relies on.
  bool reduces_natively(at::ScalarType) const override { return true; }
  bool supports_avg() const override { return true; }

  void all_reduce(at::Tensor& data, ReduceOp op) override;
  void broadcast(at::Tensor& data, int root) override;
  void all_gather(const at::Tensor& input, at::Tensor& output,
                  const std::vector<int64_t>& counts) override;
  void reduce_scatter(const at::Tensor& input, at::Tensor& output,
                      const std::vector<int64_t>& counts, ReduceOp op) override;
  void all_to_all(const at::Tensor& input, at::Tensor& output,
                  const std::vector<int64_t>& send_counts,
                  const std::vector<int64_t>& recv_counts) override;
  void send(const at::Tensor& data, int dst, int tag) override;
  void recv(at::Tensor& data, int src, int tag) override;
  void barrier() override;
  void abort() override;

 private:
  // Runs `enqueue` (NCCL calls on the communicator's stream) for an op on
  // `device`, ordered after the caller's stream, and waits for it (see above).
  // `enqueue` returns the result of its last NCCL call (ncclInProgress is polled).
  void run(NcclComm& comm, const std::string& what,
           const std::function<ncclResult_t(cudaStream_t)>& enqueue);
  NcclComm& group_comm(c10::DeviceIndex device);
  NcclComm& p2p_comm(c10::DeviceIndex device, int peer, bool sending);
  // `store` is the calling thread's own connection (store_for()).
  std::unique_ptr<NcclComm> create_comm(Store& store, const std::string& key, int nranks, int rank,
                                        bool publish, c10::DeviceIndex device);
  // The store connection of one thread role: the id exchange blocks in get(),
  // which must not hold up the other threads' exchanges on a shared socket.
  Store& store_for(std::shared_ptr<Store>& slot);
  c10::DeviceIndex device_of(const at::Tensor& t, const char* op) const;

  c10::DeviceIndex default_device_;  // current device when the group was made
  std::atomic<bool> aborted_{false};
  std::mutex mu_;  // guards the maps, not the communicators
  int comms_created_ = 0;
  std::map<c10::DeviceIndex, std::unique_ptr<NcclComm>> comms_;
  std::map<int, std::unique_ptr<NcclComm>> sends_;                     // by peer
  std::map<int, std::unique_ptr<NcclComm>> recvs_;                     // by peer
  std::shared_ptr<Store> collective_store_, send_store_, recv_store_;  // one thread each
};

std::unique_ptr<Backend> make_nccl_backend(const BackendContext& ctx);

}  // namespace tessera::comm::nccl
