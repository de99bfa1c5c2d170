#include "tessera/runtime/optimizer_chunks.h"

#include <ATen/ATen.h>

#include <string>

#include "tessera/core/check.h"
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

namespace {

bool elementwise_known(const torch::optim::Optimizer& optimizer) {
  const std::string name = optimizer_type_name(optimizer);
  return name == "Adam" || name == "AdamW" || name == "SGD";
}

bool steps_in_chunks(const at::Tensor& p, int64_t chunk_numel) {
  const at::Tensor& g = p.grad();
  return p.numel() > chunk_numel && g.defined() && !g.is_sparse() && p.is_contiguous() &&
         g.is_contiguous() && g.numel() == p.numel();
}

// Steps `param` (group g's only parameter meanwhile) range by range. Its state,
// if any, is taken out of the optimizer, handed over a range at a time as views
// and put back whole with the step count the ranges reached.
void step_by_ranges(torch::optim::Optimizer& optimizer, size_t g, const at::Tensor& param,
                    int64_t chunk_numel) {
  auto& group = optimizer.param_groups()[g];
  int64_t step = 0;
  std::vector<at::Tensor> whole;
  const bool had_state = take_param_state(optimizer, param, &step, &whole);
  int64_t step_after = step;
  const int64_t n = param.numel();
  for (int64_t begin = 0; begin < n; begin += chunk_numel) {
    const int64_t len = std::min(chunk_numel, n - begin);
    at::Tensor range = alias_range(param, begin, len);
    range.mutable_grad() = alias_range(param.grad(), begin, len);
    std::vector<at::Tensor> views;
    for (const auto& f : whole) views.push_back(alias_range(f, begin, len));
    if (had_state) put_param_state(optimizer, range, step, views);
    group.params() = {range};
    optimizer.step();
    group.params().clear();
    int64_t stepped_count = 0;
    std::vector<at::Tensor> stepped;
    if (!take_param_state(optimizer, range, &stepped_count, &stepped)) continue;  // plain SGD
    // Before the first step the optimizer creates the state of each range
    // itself: gather it into whole tensors shaped like the parameter.
    if (whole.empty()) {
      for (const auto& f : stepped) whole.push_back(at::empty(param.sizes(), f.options()));
      for (const auto& f : whole) views.push_back(alias_range(f, begin, len));
    }
    TS_INTERNAL_ASSERT(stepped.size() == whole.size(),
                       "the optimizer's state fields changed between ranges of one step");
    for (size_t k = 0; k < stepped.size(); ++k) {
      if (stepped[k].data_ptr() != views[k].data_ptr()) views[k].copy_(stepped[k].reshape({-1}));
    }
    step_after = stepped_count;
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
      if (steps_in_chunks(p, chunk_numel)) {
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
