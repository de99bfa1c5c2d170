// ZeroDataParallel: ZeRO stages 1, 2 and 3 over a process group, the sharded
// counterpart of DistributedDataParallel. The Engine drives it when
// zero_optimization.stage > 0; docs/zero.md describes what each stage keeps.
//
// Construction is collective (replicas are checked and rank 0's values broadcast,
// as DDP does). It groups the trainable parameters into FlatUnits (flat_unit.h):
// for stages 1 and 2, buckets of about reduce_bucket_size elements per optimizer
// parameter group, last parameters first; for stage 3, one unit per ShardedModule
// (sharded_module.h) and parameter group, plus stage-2 units for what stays whole
// (parameters outside every wrapped module, and those under
// stage3_param_persistence_threshold). optimizer_groups() hands the optimizer this
// rank's shards, one group per parameter group, so optimizer state is sharded.
//
// Per step: during backward a post hook on each parameter's gradient accumulator
// marks it ready; a unit whose gradients are all ready is reduced (in a fixed
// unit order, so every rank issues the same collectives; right away with
// overlap_comm, else at the end of backward). Stage 1 accumulates micro-steps
// locally and reduces at the boundary; stages 2 and 3 reduce every micro-step into
// the gradient shard. After the optimizer step, stages 1 and 2 all-gather the
// updated shards. Stage 3 gathers each unit before its forward and its backward
// (prefetching the next one), and frees it after.
//
// Ownership: shares the module and the group; owns the units. Thread safety: none;
// the training thread calls everything and runs backward.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/named_params.h"
#include "tessera/runtime/optimizer_factory.h"
#include "tessera/runtime/zero/flat_unit.h"
#include "tessera/runtime/zero/sharded_module.h"

namespace torch::autograd {
struct Node;
}

namespace tessera::runtime::zero {

class ZeroDataParallel : public UnitController {
 public:
  ZeroDataParallel(std::shared_ptr<torch::nn::Module> module,
                   std::shared_ptr<comm::ProcessGroup> group, const ZeroConfig& config,
                   std::vector<ParamGroupSpec> groups);
  ~ZeroDataParallel() override;
  ZeroDataParallel(const ZeroDataParallel&) = delete;
  ZeroDataParallel& operator=(const ZeroDataParallel&) = delete;

  int stage() const { return config_.stage; }
  torch::nn::Module& module() { return *module_; }
  comm::ProcessGroup& group() { return *group_; }

  // The optimizer's parameter groups: this rank's shards, with the groups' options
  // moved in (call once).
  std::vector<torch::optim::OptimizerParamGroup> optimizer_groups();

  // Backward of `loss`; `boundary` is the last micro-step of an accumulation window
  // (stage 1 communicates only then). Returns when every reduction has finished.
  void backward(const at::Tensor& loss, bool boundary);
  // The gradient shards' L2 norm over every rank (one all_reduce); scales them by
  // max_norm / norm when max_norm > 0 and norm > max_norm. NaN/inf anywhere is
  // seen by every rank.
  double clip_grad_norm(double max_norm);
  // After optimizer.step(): stages 1 and 2 all-gather the updated shards; every
  // stage zeroes the gradients.
  void after_step();
  void zero_grad();

  // Stage 3, collective: makes every unit's parameters whole and keeps them so
  // (forward and backward then gather nothing: one rank alone may run the model,
  // e.g. to sample text), until release_all() frees them. No-ops for stages 1, 2.
  void gather_all();
  void release_all();

  // Collective, after new values were copied into the shards (a checkpoint load):
  // stage 1 and 2 units, and stage-3 units that are gathered now, all-gather them
  // so the module's parameters show the loaded values.
  void after_shards_loaded();

  // Stage 3: the shards of the module units live in `store` from now on (the
  // caller wrote their values there first); each unit's gather reads its shard
  // from the store, and the units after the next one in forward (or backward)
  // order are read ahead. Unit indices are those of units().
  void set_shard_store(ShardStore* store);

  // Every unit (stage-3 module units first, then the whole ones).
  const std::vector<std::unique_ptr<FlatUnit>>& units() const { return units_; }
  // Parameters that no unit holds (frozen ones): kept whole, as in DDP.
  const std::vector<std::string>& names() const { return names_; }

  // Memory now held, by kind, counted from the tensors' storages.
  int64_t param_bytes() const;
  int64_t grad_bytes() const;
  int64_t buffer_bytes() const;

  // UnitController, for the ShardedModule wrappers (stage 3).
  void before_forward(size_t unit) override;
  void after_forward(size_t unit) override;
  void before_backward(size_t unit) override;

 private:
  struct ModuleUnit {  // stage 3: one wrapped module, its FlatUnits
    std::string path;
    std::shared_ptr<ShardedModuleImpl> wrapper;
    std::vector<size_t> flat_units;
    int64_t numel = 0;
  };
  void build_units(std::vector<ParamGroupSpec>& groups);
  void add_bucketed_units(const NamedParams& params, size_t group_index, int stage);
  void install_hooks();
  void on_grad_ready(size_t unit, size_t param);
  void unit_ready(size_t unit);
  void launch_ready_in_order();
  void finalize_backward();
  void reset_backward();
  // Stage 3.
  void gather_module(size_t m, bool wait);
  void release_module(size_t m);
  void prefetch(size_t m);
  // Asks the shard store to start reading the modules `ahead` positions past
  // forward_order_[pos] in `direction` (+1 forward, -1 backward).
  void read_ahead(size_t pos, int direction);
  int64_t live_gathered_numel() const;

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<comm::ProcessGroup> group_;
  ZeroConfig config_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<FlatUnit>> units_;
  std::vector<size_t> unit_group_;  // optimizer group of each unit
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> group_options_;
  std::vector<ModuleUnit> modules_;
  std::vector<int> module_of_unit_;  // -1 for whole units
  // Backward state.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::shared_ptr<ZeroDataParallel*> self_;
  std::vector<size_t> pending_;       // per unit: gradients still missing
  std::vector<bool> ready_;           // per unit
  std::vector<size_t> launch_order_;  // units, in the order they are reduced
  size_t next_launch_ = 0;
  std::vector<size_t> observed_order_;  // readiness order of the first pass
  bool order_learned_ = false;
  bool in_backward_ = false;
  bool reducing_ = false;  // this backward reduces (false: stage 1 off the boundary)
  // Stage 3 forward order (learned in the first forward), for prefetching.
  std::vector<size_t> forward_order_;
  bool forward_order_known_ = false;
  bool pinned_ = false;  // gather_all() holds every unit whole
  ShardStore* store_ = nullptr;
  std::vector<size_t> forward_seen_;
};

}  // namespace tessera::runtime::zero
