#include "tessera/runtime/zero/sharded_module.h"

#include <torch/nn/modules/container/sequential.h>

#include "tessera/core/check.h"

namespace tessera::runtime::zero {

ShardedModuleImpl::ShardedModuleImpl(std::shared_ptr<torch::nn::Module> unit,
                                     torch::nn::AnyModule forward_fn)
    : unit_(std::move(unit)), forward_fn_(std::move(forward_fn)) {
  // The unit's own members, registered under the wrapper with their names, so the
  // wrapper is invisible in parameter names.
  for (auto& p : unit_->named_parameters(/*recurse=*/false)) {
    register_parameter(p.key(), p.value(), p.value().requires_grad());
  }
  for (auto& b : unit_->named_buffers(/*recurse=*/false)) register_buffer(b.key(), b.value());
  for (auto& c : unit_->named_children()) register_module(c.key(), c.value());
}

void ShardedModuleImpl::attach(UnitController* controller, size_t index) {
  controller_ = controller;
  index_ = index;
}

at::Tensor ShardedModuleImpl::forward(at::Tensor x) {
  if (!controller_) return forward_fn_.forward<at::Tensor>(std::move(x));
  controller_->before_forward(index_);
  at::Tensor out = forward_fn_.forward<at::Tensor>(std::move(x));
  if (out.requires_grad()) {
    // Runs when the gradient of the output is computed, i.e. just before the
    // unit's own backward: the parameters must be whole again by then.
    UnitController* controller = controller_;
    const size_t index = index_;
    out.register_hook([controller, index](const at::Tensor&) { controller->before_backward(index); });
  }
  controller_->after_forward(index_);
  return out;
}

void ShardedModuleImpl::train(bool on) {
  torch::nn::Module::train(on);
  unit_->train(on);  // the unit itself is not a child of the wrapper
}

ShardPolicy ShardPolicy::by_type(std::vector<std::string> names) {
  ShardPolicy p;
  p.select = [names](const std::string&, const torch::nn::Module& m) {
    for (const auto& n : names) {
      if (m.name().find(n) != std::string::npos) return true;
    }
    return false;
  };
  return p;
}

ShardPolicy ShardPolicy::min_num_params(int64_t min_num_params) {
  ShardPolicy p;
  p.select = [min_num_params](const std::string&, const torch::nn::Module& m) {
    int64_t n = 0;
    for (const auto& t : m.parameters()) n += t.numel();
    return n > 0 && n >= min_num_params;
  };
  p.sequential_entries_only = true;
  return p;
}

namespace {

std::string join_path(const std::string& base, const std::string& name) {
  return base.empty() ? name : base + "." + name;
}

void visit(torch::nn::Module& m, const std::string& path, const ShardPolicy& policy,
           std::vector<std::string>& wrapped) {
  auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(&m);
  if (seq) {
    auto it = seq->begin();
    for (auto& child : m.named_children()) {
      TS_INTERNAL_ASSERT(it != seq->end());
      const std::string child_path = join_path(path, child.key());
      auto module = child.value();
      if (!dynamic_cast<ShardedModuleImpl*>(module.get()) && policy.select(child_path, *module)) {
        auto wrapper = std::make_shared<ShardedModuleImpl>(module, *it);
        *it = torch::nn::AnyModule(ShardedModule(wrapper));
        m.replace_module(child.key(), wrapper);
        wrapped.push_back(child_path);
      } else if (!dynamic_cast<ShardedModuleImpl*>(module.get())) {
        visit(*module, child_path, policy, wrapped);
      }
      ++it;
    }
    return;
  }
  for (auto& child : m.named_children()) {
    const std::string child_path = join_path(path, child.key());
    auto module = child.value();
    if (dynamic_cast<ShardedModuleImpl*>(module.get())) continue;
    TS_CHECK_T(ConfigError, policy.sequential_entries_only || !policy.select(child_path, *module),
               "zero::shard: '", child_path, "' (", module->name(), ") is selected as a unit, but "
               "it is held by its parent directly, not by a torch::nn::Sequential, so its "
               "forward cannot be routed through the wrapper; put the units in a Sequential");
    visit(*module, child_path, policy, wrapped);
  }
}

void collect(torch::nn::Module& m, const std::string& path,
             std::vector<std::pair<std::string, std::shared_ptr<ShardedModuleImpl>>>& out) {
  for (auto& child : m.named_children()) {
    const std::string child_path = join_path(path, child.key());
    if (auto w = std::dynamic_pointer_cast<ShardedModuleImpl>(child.value())) {
      out.emplace_back(child_path, w);
      continue;  // units do not nest
    }
    collect(*child.value(), child_path, out);
  }
}

}  // namespace

std::vector<std::string> shard(torch::nn::Module& module, const ShardPolicy& policy) {
  TS_CHECK_T(ConfigError, policy.select != nullptr, "zero::shard: the policy selects nothing");
  std::vector<std::string> wrapped;
  visit(module, "", policy, wrapped);
  TS_CHECK_T(ConfigError, !wrapped.empty() || !sharded_units(module).empty(),
             "zero::shard: no module of '", module.name(), "' matches the policy; stage 3 "
             "needs units in a torch::nn::Sequential (see docs/zero.md)");
  return wrapped;
}

std::vector<std::pair<std::string, std::shared_ptr<ShardedModuleImpl>>> sharded_units(
    torch::nn::Module& module) {
  std::vector<std::pair<std::string, std::shared_ptr<ShardedModuleImpl>>> out;
  collect(module, "", out);
  return out;
}

}  // namespace tessera::runtime::zero
