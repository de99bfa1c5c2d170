#include "tessera/runtime/optimizer_chunks.h"

#include <ATen/ATen.h>

#include <string>

#include "tessera/core/check.h"
#include "tessera/runtime/cpu_adam_optimizer.h"
#include "tessera/runtime/optimizer_state.h"

namespace tessera::runtime {

at::Tensor alias_range(const at::Tensor& base, int64_t offset, int64_t numel) {
  TS_INTERNAL_ASSERT(base.is_contiguous() && offset >= 0 && offset + numel <= base.numel(),
                     "alias_range outside its tensor");
  at::Tensor t = at::empty({0}, base.options().requires_grad(false));
  t.set_(base.storage(), base.storage_offset() + offset, {numel});
  return t;
}

GroupParamsGuard::GroupParamsGuard(torch::optim::Optimizer& optimizer) : optimizer_(optimizer) {
  for (auto& g : optimizer_.param_groups()) {
    saved_.push_back(std::move(g.params()));
    g.params().clear();
  }
}

GroupParamsGuard::~GroupParamsGuard() {
  auto& groups = optimizer_.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].params() = std::move(saved_[g]);
}

int64_t step_range(torch::optim::Optimizer& optimizer, size_t group, const at::Tensor& param,
                   const at::Tensor& grad, const std::vector<at::Tensor>& fields, int64_t begin,
                   int64_t n, bool has_state, int64_t step) {
  at::Tensor range = alias_range(param, begin, n);
  range.mutable_grad() = alias_range(grad, begin, n);
  std::vector<at::Tensor> state;
  for (const auto& f : fields) state.push_back(alias_range(f, begin, n));
  if (has_state) put_param_state(optimizer, range, step, state);
  auto& params = optimizer.param_groups().at(group).params();
  params = {range};
  optimizer.step();
  params.clear();
  int64_t step_after = 0;
  std::vector<at::Tensor> stepped;
  const bool has = take_param_state(optimizer, range, &step_after, &stepped);
  // SGD without momentum keeps no state at all.
  TS_INTERNAL_ASSERT(has ? stepped.size() == state.size() : state.empty(),
                     "the optimizer's state after a step does not have the expected fields");
  // A state the optimizer created itself (the first step) lives in its own memory.
  for (size_t k = 0; k < state.size(); ++k) {
    if (stepped[k].data_ptr() != state[k].data_ptr()) state[k].copy_(stepped[k].reshape({-1}));
  }
  return step_after;
}

namespace {

bool elementwise_known(const torch::optim::Optimizer& optimizer) {
  const std::string name = optimizer_type_name(optimizer);
  return name == "Adam" || name == "AdamW" || name == "SGD";
}

bool is_cpu_adam(const torch::optim::Optimizer& optimizer) {
  return dynamic_cast<const CpuAdam*>(&optimizer) != nullptr ||
         dynamic_cast<const CpuAdamW*>(&optimizer) != nullptr;
}

// The CPU Adam's kernel makes no temporaries: its parameters step whole, all in
// one parallel region.
bool steps_in_chunks(const torch::optim::Optimizer& optimizer, const at::Tensor& p,
                     int64_t chunk_numel) {
  const at::Tensor& g = p.grad();
  return p.numel() > chunk_numel && g.defined() && !g.is_sparse() && p.is_contiguous() &&
         g.is_contiguous() && g.numel() == p.numel() &&
         !(is_cpu_adam(optimizer) && cpu_adam_steps(p));
}

// Steps `param` (group g's only parameter meanwhile) range by range. Its state
// is taken out of the optimizer (or, before the first step, made empty in the
// parameter's shape), handed over a range at a time as views and put back whole
// with the step count the ranges reached.
void step_by_ranges(torch::optim::Optimizer& optimizer, size_t g, const at::Tensor& param,
                    int64_t chunk_numel) {
  int64_t step = 0;
  std::vector<at::Tensor> whole;
  const bool had_state = take_param_state(optimizer, param, &step, &whole);
  if (!had_state) {
    const auto fields = param_state_fields(optimizer, optimizer.param_groups()[g].options());
    for (size_t k = 0; k < fields.size(); ++k) {
      whole.push_back(at::empty_like(param, at::MemoryFormat::Contiguous));
    }
  }
  int64_t step_after = step;
  const int64_t n = param.numel();
  for (int64_t begin = 0; begin < n; begin += chunk_numel) {
    step_after = step_range(optimizer, g, param, param.grad(), whole, begin,
                            std::min(chunk_numel, n - begin), had_state, step);
  }
  if (!whole.empty()) put_param_state(optimizer, param, step_after, whole);
}

}  // namespace

void step_in_chunks(torch::optim::Optimizer& optimizer, int64_t chunk_numel) {
  TS_INTERNAL_ASSERT(chunk_numel > 0);
  if (!elementwise_known(optimizer)) {
    optimizer.step();
    return;
  }
  at::NoGradGuard no_grad;
  GroupParamsGuard guard(optimizer);
  auto& groups = optimizer.param_groups();
  std::vector<std::vector<at::Tensor>> large(groups.size());
  bool any_small = false;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : guard.saved(g)) {
      if (steps_in_chunks(optimizer, p, chunk_numel)) {
        large[g].push_back(p);
      } else {
        groups[g].params().push_back(p);
        any_small = true;
      }
    }
  }
  if (any_small) optimizer.step();
  for (auto& group : groups) group.params().clear();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : large[g]) step_by_ranges(optimizer, g, p, chunk_numel);
  }
}

}  // namespace tessera::runtime
