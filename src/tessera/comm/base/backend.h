// Backend: one transport's implementation of the collectives, for one group.
//
// A Backend is created per ProcessGroup by a registered factory (see
// backend_registry.h) and only ever sees flat, contiguous, 1-D tensors of the
// group's device. The ProcessGroup above it owns everything else: sequence
// numbers, the async queue, shape/dtype/contiguity checks, list forms, upcasting
// of half types the backend can't reduce exactly, AVG when the backend has no
// native AVG, debug cross-checks, and enriching errors with group/op/sequence.
//
// Contract of every op below:
//   * blocking: returns when this rank's part is complete;
//   * called from one thread at a time for collectives (the group's collective
//     thread), and for p2p from the group's send thread or receive thread, which
//     may run concurrently with each other and with a collective;
//   * every rank of the group calls the collectives in the same order;
//   * never blocks past options().timeout: a peer that is dead or absent turns
//     into CommError (peer gone) or TimeoutError (peer silent) within it;
//   * tensors may have zero elements (the op must still complete on every rank).
//
// A backend that does not support an op or dtype throws CommError
// "backend X does not support Y".
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/base/reduce_op.h"
#include "tessera/comm/base/store.h"

namespace tessera::comm {

// Everything a backend factory gets to build one group's backend.
struct BackendContext {
  std::shared_ptr<Store> store;      // already prefixed with the group's namespace
  int rank = 0;                      // rank within the group
  int size = 1;                      // group size
  std::vector<int> global_ranks;     // group rank -> global rank
  std::string group_name = "default";
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // The host every rank reaches the job's store at (node 0). Backends that open
  // their own connections bind this host's address on the route toward it;
  // empty: MASTER_ADDR.
  std::string rendezvous_host;
};

class Backend {
 public:
  explicit Backend(BackendContext ctx) : ctx_(std::move(ctx)) {}
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string name() const = 0;
  int rank() const { return ctx_.rank; }
  int size() const { return ctx_.size; }
  const BackendContext& context() const { return ctx_; }

  // True if tensors on `device` can be handed to this backend. CPU backends
  // (gloo, shm, mpi) take CPU tensors only; a GPU backend overrides this. The
  // ProcessGroup refuses other tensors with an error naming backend and device.
  virtual bool supports_device(c10::DeviceType device) const {
    return device == c10::DeviceType::CPU;
  }

  // True if reductions of `dtype` are computed exactly enough by the backend
  // itself (half types accumulated in float32). When false, the ProcessGroup
  // reduces Half/BFloat16 through all_to_all and all_gather of 16-bit slices,
  // combined in float32 (half_reduction.h).
  virtual bool reduces_natively(at::ScalarType dtype) const { return true; }
  // True if the backend implements ReduceOp::kAvg; otherwise the ProcessGroup
  // runs kSum and divides.
  virtual bool supports_avg() const { return false; }

  // In place: data = op over every rank's data.
  virtual void all_reduce(at::Tensor& data, ReduceOp op) = 0;

  // In place: data = root's data on every rank.
  virtual void broadcast(at::Tensor& data, int root) = 0;

  // output (sum(counts) elements) = concatenation of every rank's input in rank
  // order; input has counts[rank()] elements. Counts may differ between ranks.
  virtual void all_gather(const at::Tensor& input, at::Tensor& output,
                          const std::vector<int64_t>& counts) = 0;

  // input has sum(counts) elements, split in rank order by counts; output
  // (counts[rank()] elements) = op over every rank's slice number rank().
  virtual void reduce_scatter(const at::Tensor& input, at::Tensor& output,
                              const std::vector<int64_t>& counts, ReduceOp op) = 0;

  // Rank i sends input slice j (send_counts[j] elements) to rank j, and receives
  // into output slice j (recv_counts[j] elements) what rank j sent to it.
  virtual void all_to_all(const at::Tensor& input, at::Tensor& output,
                          const std::vector<int64_t>& send_counts,
                          const std::vector<int64_t>& recv_counts) = 0;

  // Point to point; tags separate concurrent streams between the same two ranks.
  // send() must not wait for anything but the transfer itself, so an exchange
  // (both ranks send, then both receive) never deadlocks.
  virtual void send(const at::Tensor& data, int dst, int tag) = 0;
  virtual void recv(at::Tensor& data, int src, int tag) = 0;

  // Returns once every rank of the group has entered the barrier.
  virtual void barrier() = 0;

  // Best effort, from any thread: make blocked and future ops fail fast. Used when
  // the group is being torn down after an error. Must not block.
  virtual void abort() {}

 protected:
  BackendContext ctx_;
};

}  // namespace tessera::comm
