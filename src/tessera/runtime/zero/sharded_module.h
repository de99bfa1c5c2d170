// ZeRO stage 3 units: tessera::zero::shard(module, policy) and the wrapper it puts
// in place of each unit.
//
// LibTorch modules have no forward hooks, so the units whose parameters stage 3
// gathers and frees are marked by wrapping them. shard() walks the module tree
// and replaces every entry of a torch::nn::Sequential that the policy selects with
// a ShardedModule. The wrapper's forward asks the ZeRO engine to gather the unit's
// parameters (waiting for a prefetch started by the previous unit), runs the unit,
// hooks its output so that the parameters are gathered again just before the
// unit's backward, and lets the engine free them. Parameter names do not change
// ("h.0.attn.c_attn.weight" stays that), so checkpoints and optimizer groups are
// the same with and without sharding.
//
//   auto model = GPT(cfg);                                  // blocks in a Sequential
//   tessera::zero::shard(*model, ShardPolicy::by_type({"Block"}));
//   auto engine = tessera::initialize(model, cfg_with_stage_3);
//
// The Engine with stage 3 calls shard() itself with the default policy when the
// model has no units yet: every Sequential entry with at least
// stage3_param_persistence_threshold parameters (the GPT's blocks). A unit must
// take one tensor and return one tensor (what Sequential calls). Units inside a
// container other than Sequential (a ModuleList or a typed member) cannot be
// swapped: shard() raises a ConfigError naming them.
//
// Without a ZeRO engine attached, a ShardedModule just runs its unit.
// Thread safety: none, like any module.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tessera::runtime::zero {

// What ShardedModule asks of the engine; implemented by the ZeRO engine.
class UnitController {
 public:
  virtual ~UnitController() = default;
  virtual void before_forward(size_t unit) = 0;
  virtual void after_forward(size_t unit) = 0;
  virtual void before_backward(size_t unit) = 0;
};

class ShardedModuleImpl : public torch::nn::Module {
 public:
  // `unit` is the module being wrapped (with its forward in `forward_fn`).
  ShardedModuleImpl(std::shared_ptr<torch::nn::Module> unit, torch::nn::AnyModule forward_fn);

  at::Tensor forward(at::Tensor x);
  void train(bool on = true) override;

  const std::shared_ptr<torch::nn::Module>& unit() const { return unit_; }
  // Called by the engine: from now on forward goes through `controller` as unit
  // number `index`. nullptr detaches.
  void attach(UnitController* controller, size_t index);

 private:
  std::shared_ptr<torch::nn::Module> unit_;
  torch::nn::AnyModule forward_fn_;
  UnitController* controller_ = nullptr;
  size_t index_ = 0;
};
TORCH_MODULE(ShardedModule);

// Which modules become units. The default is size-based, like FSDP's
// size_based_auto_wrap_policy(min_num_params).
struct ShardPolicy {
  std::function<bool(const std::string& path, const torch::nn::Module& module)> select;
  // True: only entries of a Sequential are considered, anything else is searched
  // further. False: a selected module outside a Sequential is an error.
  bool sequential_entries_only = false;

  // Modules whose class name (torch::nn::Module::name(), e.g. "tessera::models::
  // BlockImpl") contains one of `names` ("Block" matches BlockImpl).
  static ShardPolicy by_type(std::vector<std::string> names);
  // Modules with at least `min_num_params` parameters.
  static ShardPolicy min_num_params(int64_t min_num_params);
};

// Replaces the selected modules with ShardedModule wrappers (in place; the
// selected module's own children are not searched further). Returns the paths of
// the units, in registration order. ConfigError when a selected module sits in a
// container that cannot be rewired (see above), or when nothing matches.
std::vector<std::string> shard(torch::nn::Module& module, const ShardPolicy& policy);

// The ShardedModule wrappers in `module`, with their paths, in registration order.
std::vector<std::pair<std::string, std::shared_ptr<ShardedModuleImpl>>> sharded_units(
    torch::nn::Module& module);

}  // namespace tessera::runtime::zero

namespace tessera::zero {
using runtime::zero::shard;
using runtime::zero::ShardedModule;
using runtime::zero::ShardPolicy;
}  // namespace tessera::zero
