// ProcessGroup: the collectives API users and every higher layer call.
//
// A group is a set of ranks with one Backend. Each op is queued on the group's
// background thread (collectives on one queue, sends and receives on one queue
// each) and returns a Work; call wait() on it. Every rank must issue the group's
// collectives in the same order; each gets a per-group sequence number (#1, #2...).
//
// The group accepts what users hand it and gives the backend only flat contiguous
// tensors: any shape, non-contiguous inputs are copied (and results copied back),
// half types are reduced over 16-bit wires with one float32 rounding when the
// backend can't do that itself (half_reduction.h), AVG is SUM-then-divide when
// the backend lacks it.
//
// Failures: a backend error is rethrown from wait() with the group, op, sequence
// number and, from the ranks' progress heartbeats in the store, the ranks that had
// not joined. After a failed collective the group is broken: later ops fail fast
// with the first error. Nothing waits past the timeout (TESSERA_TIMEOUT).
// With TESSERA_DEBUG=detail, ranks compare (seq, op, dtype, shape) through the
// store before each collective, and a mismatch is a CommError naming both sides.
//
// Thread safety: ops may be queued from any thread, but the order in which a
// rank queues collectives is the order they run in, so queue them from one thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/base/backend.h"
#include "tessera/comm/base/reduce_op.h"
#include "tessera/comm/base/store.h"
#include "tessera/comm/base/work.h"
#include "tessera/comm/comm_stats.h"

namespace tessera::comm {

struct ProcessGroupOptions {
  std::string name = "default";
  std::string backend = "auto";  // see backend_registry.h
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  bool debug_detail = false;  // TESSERA_DEBUG=detail
  // Seconds between progress heartbeats published to the store (0: off).
  double heartbeat_interval = 1.0;
  // The stall inspector: seconds a collective may wait before this rank logs
  // which collective it waits in (sequence number, op, shape) and which ranks
  // have not joined it (0: off; TESSERA_STALL_WARN, config
  // stall_check_time_seconds) ...
  double stall_warn = 60.0;
  // ... and before the group fails that collective with a TimeoutError naming
  // the same, so that a stalled job ends instead of waiting for `timeout`
  // (0: off; TESSERA_STALL_SHUTDOWN, config stall_shutdown_time_seconds).
  double stall_shutdown = 0.0;
  // The host every rank reaches the job's store at; backends that open their own
  // connections (gloo) bind the local address routed toward it. tessera::init()
  // sets it from the launch (under srun: the first node of the step); empty:
  // MASTER_ADDR.
  std::string rendezvous_host;
  // Options from the environment (TESSERA_TIMEOUT, TESSERA_DEBUG, ...).
  static ProcessGroupOptions from_env(const std::string& name = "default");
};

class ProcessGroupImpl;

class ProcessGroup {
 public:
  // Collective over the given ranks: builds the backend (rendezvous through
  // `store`, which this group prefixes with its name). global_ranks maps group
  // rank -> global rank (identity if empty).
  ProcessGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
               std::vector<int> global_ranks = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;
  std::string backend_name() const;
  const std::vector<int>& global_ranks() const;
  std::chrono::milliseconds timeout() const;
  // This group's own key space in the job's store (its instance prefix), shared
  // by its members and by nobody else: for side channels that must not use the
  // group's collectives, such as a checkpoint committed by a background thread.
  // Keys under "backend/" and "progress/" are the group's own.
  std::shared_ptr<Store> store() const;
  // Sequence number of the last collective queued (0 before the first).
  uint64_t sequence_number() const;
  // Calls and bytes sent so far per op type by this rank (comm_stats.h); counted
  // when an op runs. Thread-safe.
  CommStats comm_stats() const;

  // In place on every rank.
  WorkHandle all_reduce(at::Tensor tensor, ReduceOp op = ReduceOp::kSum);
  WorkHandle broadcast(at::Tensor tensor, int root = 0);
  // outputs[i] receives rank i's input; every output has the input's shape/dtype.
  WorkHandle all_gather(std::vector<at::Tensor> outputs, at::Tensor input);
  // Flat form: output is split in rank order by shard_sizes(output.numel(), size())
  // and input must hold exactly this rank's shard (any shape with that numel).
  WorkHandle all_gather_into(at::Tensor output, at::Tensor input);
  // input is split in rank order by shard_sizes(input.numel(), size()); output
  // (this rank's shard size) receives op over every rank's slice for this rank.
  WorkHandle reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op = ReduceOp::kSum);
  // Splits are element counts along the flattened tensors; empty means equal
  // splits (numel must then divide by size()).
  WorkHandle all_to_all(at::Tensor output, at::Tensor input,
                        std::vector<int64_t> output_splits = {},
                        std::vector<int64_t> input_splits = {});
  WorkHandle send(at::Tensor tensor, int dst, int tag = 0);
  WorkHandle recv(at::Tensor tensor, int src, int tag = 0);
  WorkHandle barrier();

  // Collective over this group: every rank calls it with the same list of group
  // ranks. Returns the subgroup for members, nullptr for the others.
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks,
                                             const std::string& backend = "");

  // Stops the background threads; pending ops fail. Never blocks past the timeout.
  void shutdown();

 private:
  std::unique_ptr<ProcessGroupImpl> impl_;
};

// Sizes of `size` contiguous shards of `numel` elements: the first numel % size
// shards get one extra element. The partition every flat collective uses.
std::vector<int64_t> shard_sizes(int64_t numel, int size);

}  // namespace tessera::comm
