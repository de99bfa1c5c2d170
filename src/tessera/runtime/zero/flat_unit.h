// FlatUnit: the parameters of one ZeRO unit laid out in one flat buffer and split
// into equal per-rank shards (partition.h), with this rank's shard of the
// parameters, of the gradients and (through the optimizer) of the optimizer state.
//
// What a unit keeps between steps, by stage (S = shard, P = whole unit):
//   stage 1  flat parameters P (the module's parameters are views into it),
//            flat gradients P (the module's .grad are views into it), whose own
//            range is the shard's gradient
//   stage 2  flat parameters P; gradient shard S. The module's .grad exist only
//            during backward: once a unit's gradients are ready they are copied
//            into one flat buffer that is reduce-scattered and then dropped.
//   stage 3  parameter shard S, gradient shard S. The flat parameters exist only
//            while gathered (gather() before the unit's forward and backward,
//            release() after); release returns the bytes (the storage is
//            resized to 0), so the module's parameters keep their identity for
//            autograd but hold no memory.
// The optimizer steps shard(): a tensor of S elements (a view into the flat
// parameters for stages 1 and 2, its own storage for stage 3) whose .grad is the
// gradient shard.
//
// Collectives go to the group passed in; every rank calls them in the same order.
// Thread safety: none; the training thread drives it (backward hooks run there).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/runtime/zero/partition.h"
#include "tessera/runtime/zero/shard_store.h"

namespace tessera::runtime::zero {

class FlatUnit {
 public:
  // params: the module's parameters of this unit (one dtype, one optimizer
  // parameter group), in flat order; names for errors and checkpoints. stage 1-3.
  // Copies the parameters' current values into the unit; under stage 3 they are
  // released right away.
  FlatUnit(std::vector<std::string> names, std::vector<at::Tensor> params, int stage, int rank,
           int world, int64_t alignment = 16);
  FlatUnit(const FlatUnit&) = delete;
  FlatUnit& operator=(const FlatUnit&) = delete;

  int stage() const { return stage_; }
  const FlatPartition& partition() const { return partition_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  // The optimizer's view of this unit: S elements, .grad = the gradient shard.
  const at::Tensor& shard() const { return shard_; }
  // The gradient shard. Stages 2 and 3 defer zeroing it (zero_grad() and the
  // constructor only mark it; the first reduction copies instead of adding), so
  // its pages are not touched before the first backward (a model larger than
  // memory can move its parameter shards to disk first); this accessor zeroes
  // it if nothing was reduced into it since.
  const at::Tensor& grad_shard() const;

  // --- gradients -----------------------------------------------------------
  // Starts the reduction of this unit's gradients (averaged over the group) into
  // the gradient shard: reduce-scatter (or all-reduce with use_reduce_scatter =
  // false). Stages 2 and 3 drop the module's .grad of the unit here.
  void launch_reduce(comm::ProcessGroup& group, bool use_reduce_scatter);
  // Waits for it; stages 2 and 3 add the result to the gradient shard
  // (accumulation across micro-steps). No-op if nothing is in flight.
  void finish_reduce();
  // Zeroes the gradient shard (stage 1: the whole flat gradient buffer).
  void zero_grad();
  // Stage 1: points .grad of the module's parameters back at their views of the
  // flat gradients if something replaced them (LibTorch 2.x set-to-none).
  void bind_gradients();

  // --- parameters ----------------------------------------------------------
  // Stages 1 and 2, after the optimizer stepped the shard: starts the all-gather
  // that brings every rank's updated shard into the flat parameters.
  void launch_gather(comm::ProcessGroup& group);
  void finish_gather();
  // Stage 3: makes the module's parameters whole (allocating the flat buffer);
  // launch_gather/finish_gather split it for prefetching. is_gathered() is true
  // from launch to release.
  bool is_gathered() const { return gathered_; }
  bool gather_in_flight() const { return gather_work_ != nullptr; }
  // Stage 3: frees the flat parameters (the bytes are returned).
  void release();
  // Stage 3: from now on the shard's values live in `store` as unit `index`; the
  // shard tensor keeps its identity (the optimizer holds it) but no memory. The
  // caller has already written the current values into the store.
  void bind_shard_store(ShardStore* store, size_t index);
  bool shard_in_store() const { return store_ != nullptr; }

  // Stage 2 inside an accumulation window: finish_reduce() keeps the flattened
  // gradient and output buffers for the next micro-step's reduction instead of
  // freeing them, so each micro-step does not fault a unit-sized buffer in
  // again. Set false for the window's last micro-step: the buffers go with it,
  // and nothing is held between steps.
  void set_keep_reduce_buffers(bool keep) { keep_reduce_buffers_ = keep && stage_ == 2; }

  // Bytes now held by each kind of storage of this unit (what memory_stats adds).
  int64_t param_bytes() const;     // flat parameters (if allocated) + stage-3 shard
  int64_t grad_bytes() const;      // flat gradients / gradient shard + live .grad
  int64_t buffer_bytes() const;    // communication buffers in flight
  int64_t numel() const { return partition_.total_numel(); }

 private:
  void bind_params_to_flat();

  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;
  int stage_;
  int rank_;
  FlatPartition partition_;
  at::Tensor flat_params_;  // P elements (stage 3: storage resized to 0 when released)
  at::Tensor flat_grads_;   // stage 1: P elements
  at::Tensor shard_;        // S elements, the optimizer's parameter
  at::Tensor grad_shard_;   // S elements
  mutable bool grad_zero_pending_ = false;  // stages 2, 3: grad_shard_ means zeros
  bool gathered_ = true;
  // In flight.
  comm::WorkHandle reduce_work_;
  at::Tensor reduce_input_;   // stages 2, 3: the unit's gradients, flattened
  at::Tensor reduce_output_;  // S elements (or P for all-reduce)
  bool reduce_all_ = false;
  bool keep_reduce_buffers_ = false;
  at::Tensor kept_input_;   // stage 2 between micro-steps (set_keep_reduce_buffers)
  at::Tensor kept_output_;
  // Stages 1 and 2: the last reduce-scatter's output, from the boundary's
  // reduction until the all-gather after the step uses it as its input (one
  // shard-sized buffer per step instead of two; nothing held between steps).
  at::Tensor spare_shard_;
  comm::WorkHandle gather_work_;
  at::Tensor gather_input_;
  ShardStore* store_ = nullptr;  // stage 3 with offloaded shards
  size_t store_index_ = 0;
};

}  // namespace tessera::runtime::zero
