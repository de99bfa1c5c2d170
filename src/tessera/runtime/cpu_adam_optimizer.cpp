#include "tessera/runtime/cpu_adam_optimizer.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <functional>
#include <unordered_set>

#include "tessera/runtime/optimizer_chunks.h"

namespace tessera::runtime {
namespace {

bool kernel_tensor(const at::Tensor& t, int64_t numel) {
  return t.defined() && t.device().is_cpu() && t.layout() == c10::kStrided &&
         t.scalar_type() == at::kFloat && t.is_contiguous() && t.numel() == numel;
}

template <typename State>
bool kernel_state(const State& s, int64_t numel, bool amsgrad) {
  return kernel_tensor(s.exp_avg(), numel) && kernel_tensor(s.exp_avg_sq(), numel) &&
         (!amsgrad || kernel_tensor(s.max_exp_avg_sq(), numel));
}

// The parameters the kernel steps, with their groups' options, and the others.
template <typename State>
struct Split {
  struct Entry {
    at::Tensor param;
    size_t group;
  };
  std::vector<Entry> kernel;
  std::vector<std::vector<at::Tensor>> rest;
  bool any_rest = false;
};

template <typename Options, typename State>
Split<State> split_params(torch::optim::Optimizer& opt) {
  Split<State> split;
  auto& groups = opt.param_groups();
  split.rest.resize(groups.size());
  std::unordered_set<const void*> seen;
  bool repeated = false;  // a parameter in two groups is stepped twice, in order
  for (size_t g = 0; g < groups.size(); ++g) {
    const bool amsgrad = static_cast<const Options&>(groups[g].options()).amsgrad();
    for (const auto& p : groups[g].params()) {
      if (!p.grad().defined()) continue;
      repeated = repeated || !seen.insert(p.unsafeGetTensorImpl()).second;
      auto it = opt.state().find(p.unsafeGetTensorImpl());
      const bool ours = cpu_adam_steps(p) &&
                        (it == opt.state().end() ||
                         kernel_state(static_cast<const State&>(*it->second), p.numel(), amsgrad));
      if (ours) {
        split.kernel.push_back({p, g});
      } else {
        split.rest[g].push_back(p);
        split.any_rest = true;
      }
    }
  }
  if (repeated) {  // LibTorch steps them all, in its order
    for (size_t g = 0; g < groups.size(); ++g) split.rest[g] = groups[g].params();
    split.kernel.clear();
    split.any_rest = true;
  }
  return split;
}

// The kernel's task for `p`, its state created (as LibTorch creates it) or
// advanced by one step.
template <typename Options, typename State>
CpuAdamTask task_for(torch::optim::Optimizer& opt, const at::Tensor& p, const Options& o,
                     bool adamw) {
  auto& slot = opt.state()[p.unsafeGetTensorImpl()];
  if (!slot) {
    auto fresh = std::make_unique<State>();
    fresh->step(0);
    fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
    fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
    if (o.amsgrad()) fresh->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
    slot = std::move(fresh);
  }
  auto& s = static_cast<State&>(*slot);
  s.step(s.step() + 1);
  CpuAdamTask t;
  t.hyper.lr = o.lr();
  t.hyper.beta1 = std::get<0>(o.betas());
  t.hyper.beta2 = std::get<1>(o.betas());
  t.hyper.eps = o.eps();
  t.hyper.weight_decay = o.weight_decay();
  t.hyper.adamw = adamw;
  t.hyper.amsgrad = o.amsgrad();
  t.hyper.step = s.step();
  t.buffers.param = p.data_ptr<float>();
  t.buffers.grad = p.grad().data_ptr<float>();
  t.buffers.exp_avg = s.exp_avg().template data_ptr<float>();
  t.buffers.exp_avg_sq = s.exp_avg_sq().template data_ptr<float>();
  if (o.amsgrad()) t.buffers.max_exp_avg_sq = s.max_exp_avg_sq().template data_ptr<float>();
  t.buffers.numel = p.numel();
  return t;
}

// LibTorch steps the parameters the kernel does not take (first, so that an
// error there, e.g. a sparse gradient, leaves the kernel's parameters as they
// were); then the kernel steps the rest of them in one parallel region.
template <typename Options, typename State>
void step_all(torch::optim::Optimizer& opt, bool adamw, const CpuAdamOptions& kernel,
              const std::function<void()>& libtorch_step) {
  Split<State> split = split_params<Options, State>(opt);
  if (split.any_rest) {
    GroupParamsGuard guard(opt);
    for (size_t g = 0; g < split.rest.size(); ++g) opt.param_groups()[g].params() = split.rest[g];
    libtorch_step();
  }
  if (split.kernel.empty()) return;
  std::vector<CpuAdamTask> tasks;
  tasks.reserve(split.kernel.size());
  for (const auto& e : split.kernel) {
    const auto& o = static_cast<const Options&>(opt.param_groups()[e.group].options());
    tasks.push_back(task_for<Options, State>(opt, e.param, o, adamw));
  }
  cpu_adam_update(tasks, kernel);
  // As LibTorch's in-place ops would: autograd sees that these tensors changed.
  for (const auto& e : split.kernel) {
    e.param.unsafeGetTensorImpl()->bump_version();
    const auto& s = static_cast<const State&>(*opt.state().at(e.param.unsafeGetTensorImpl()));
    for (const at::Tensor* t : {&s.exp_avg(), &s.exp_avg_sq(), &s.max_exp_avg_sq()}) {
      if (t->defined()) t->unsafeGetTensorImpl()->bump_version();
    }
  }
}

template <typename F>
at::Tensor with_closure(torch::optim::Optimizer::LossClosure& closure, F&& step) {
  at::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  step();
  return loss;
}

}  // namespace

bool cpu_adam_steps(const at::Tensor& param) {
  return kernel_tensor(param, param.numel()) && kernel_tensor(param.grad(), param.numel());
}

at::Tensor CpuAdam::step(LossClosure closure) {
  return with_closure(closure, [this] {
    step_all<torch::optim::AdamOptions, torch::optim::AdamParamState>(
        *this, /*adamw=*/false, kernel_, [this] { torch::optim::Adam::step(nullptr); });
  });
}

at::Tensor CpuAdamW::step(LossClosure closure) {
  return with_closure(closure, [this] {
    step_all<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
        *this, /*adamw=*/true, kernel_, [this] { torch::optim::AdamW::step(nullptr); });
  });
}

}  // namespace tessera::runtime
