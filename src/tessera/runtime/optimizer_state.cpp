#include "tessera/runtime/optimizer_state.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <unordered_map>

#include "tessera/core/check.h"

namespace tessera::runtime {
namespace {

using checkpoint::NamedTensors;

std::string state_key(const at::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}

at::Tensor step_tensor(int64_t step) { return at::scalar_tensor(step, at::kLong); }

// The LibTorch Adam and AdamW states have the same fields but no common base.
template <typename State>
void save_adam_like(const State& s, const std::string& base, NamedTensors& out) {
  out.emplace_back(base + "step", step_tensor(s.step()));
  out.emplace_back(base + "exp_avg", s.exp_avg().detach());
  out.emplace_back(base + "exp_avg_sq", s.exp_avg_sq().detach());
  if (s.max_exp_avg_sq().defined() && s.max_exp_avg_sq().numel() > 0) {
    out.emplace_back(base + "max_exp_avg_sq", s.max_exp_avg_sq().detach());
  }
}

class Lookup {
 public:
  Lookup(const NamedTensors& tensors) {
    for (const auto& t : tensors) by_name_.emplace(t.first, &t.second);
  }
  const at::Tensor* find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }
  // A copy of `name` shaped like `param`, in its dtype and device.
  at::Tensor like(const std::string& name, const at::Tensor& param) const {
    const at::Tensor* t = find(name);
    TS_CHECK_T(CheckpointError, t != nullptr, "checkpoint has no optimizer tensor '", name,
               "'; was it saved with a different optimizer type?");
    TS_CHECK_T(CheckpointError, t->sizes() == param.sizes(), "optimizer tensor '", name,
               "' has shape ", t->sizes(), " in the checkpoint but its parameter has ",
               param.sizes(), "; check the model config");
    return t->to(param.options(), /*non_blocking=*/false, /*copy=*/true);
  }

 private:
  std::unordered_map<std::string, const at::Tensor*> by_name_;
};

template <typename State>
std::unique_ptr<State> load_adam_like(const Lookup& in, const std::string& base,
                                      const at::Tensor& p) {
  auto s = std::make_unique<State>();
  s->step(in.find(base + "step")->item<int64_t>());
  s->exp_avg(in.like(base + "exp_avg", p));
  s->exp_avg_sq(in.like(base + "exp_avg_sq", p));
  if (in.find(base + "max_exp_avg_sq")) s->max_exp_avg_sq(in.like(base + "max_exp_avg_sq", p));
  return s;
}

enum class Kind { kAdam, kAdamW, kSgd };

Kind kind_of(torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) return Kind::kAdam;
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) return Kind::kAdamW;
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) return Kind::kSgd;
  TS_THROW(CheckpointError, "checkpointing supports the Adam, AdamW and SGD optimizers only");
}

}  // namespace

NamedTensors optimizer_state(torch::optim::Optimizer& optimizer, const NamedParams& params,
                             const std::string& prefix) {
  NamedTensors out;
  auto& state = optimizer.state();
  const Kind kind = kind_of(optimizer);
  for (size_t i = 0; i < params.params.size(); ++i) {
    auto it = state.find(state_key(params.params[i]));
    if (it == state.end()) continue;
    const std::string base = prefix + params.names[i] + ".";
    if (kind == Kind::kAdam) {
      save_adam_like(static_cast<torch::optim::AdamParamState&>(*it->second), base, out);
    } else if (kind == Kind::kAdamW) {
      save_adam_like(static_cast<torch::optim::AdamWParamState&>(*it->second), base, out);
    } else {
      auto& s = static_cast<torch::optim::SGDParamState&>(*it->second);
      if (s.momentum_buffer().defined()) {
        out.emplace_back(base + "momentum_buffer", s.momentum_buffer().detach());
      }
    }
  }
  return out;
}

StagedOptimizerState stage_optimizer_state(torch::optim::Optimizer& optimizer,
                                           const NamedParams& params,
                                           const NamedTensors& tensors,
                                           const std::string& prefix) {
  const Lookup in(tensors);
  const Kind kind = kind_of(optimizer);
  at::NoGradGuard no_grad;
  StagedOptimizerState staged;
  for (size_t i = 0; i < params.params.size(); ++i) {
    const at::Tensor& p = params.params[i];
    const std::string base = prefix + params.names[i] + ".";
    std::unique_ptr<torch::optim::OptimizerParamState> state;
    if (kind != Kind::kSgd) {
      if (in.find(base + "step")) {  // else no step was taken for this parameter
        if (kind == Kind::kAdam) {
          state = load_adam_like<torch::optim::AdamParamState>(in, base, p);
        } else {
          state = load_adam_like<torch::optim::AdamWParamState>(in, base, p);
        }
      }
    } else if (in.find(base + "momentum_buffer")) {
      auto sgd = std::make_unique<torch::optim::SGDParamState>();
      sgd->momentum_buffer(in.like(base + "momentum_buffer", p));
      state = std::move(sgd);
    }
    staged.keys.push_back(state_key(p));
    staged.states.push_back(std::move(state));
  }
  return staged;
}

void install_optimizer_state(torch::optim::Optimizer& optimizer, StagedOptimizerState staged) {
  auto& state = optimizer.state();
  for (size_t i = 0; i < staged.keys.size(); ++i) {
    state.erase(staged.keys[i]);
    if (staged.states[i]) state[staged.keys[i]] = std::move(staged.states[i]);
  }
}

void load_optimizer_state(torch::optim::Optimizer& optimizer, const NamedParams& params,
                          const NamedTensors& tensors, const std::string& prefix) {
  install_optimizer_state(optimizer, stage_optimizer_state(optimizer, params, tensors, prefix));
}

}  // namespace tessera::runtime
