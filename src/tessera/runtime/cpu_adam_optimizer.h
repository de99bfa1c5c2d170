// Adam and AdamW that step CPU float32 parameters with Tessera's CPU Adam kernel
// (cpu_adam.h) and every other parameter (another device or dtype, a
// non-contiguous tensor, a sparse gradient) with LibTorch's own step. The
// config's Adam and AdamW are these unless optimizer.params.torch_adam is true.
//
// They are a torch::optim::Adam and a torch::optim::AdamW: the same options, the
// same per-parameter state (AdamParamState / AdamWParamState: step, exp_avg,
// exp_avg_sq, max_exp_avg_sq), the same save() and load(). optimizer_state.h
// names them "Adam" and "AdamW" and stores their state like LibTorch's, so a
// checkpoint written with torch_adam true loads with it false and back. Their
// updates are LibTorch's up to the rounding of one square root (cpu_adam.h);
// with CpuAdamSqrt::kLibTorch they equal LibTorch's bit for bit.
//
// A step updates all kernel-stepped parameters of all groups in one parallel
// region, and allocates nothing after the first (LibTorch's allocates two
// temporaries per parameter). Not thread-safe: step() from one thread, like
// every torch::optim optimizer.
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <vector>

#include "tessera/runtime/cpu_adam.h"

namespace tessera::runtime {

// Whether step() gives `param` (with its current gradient) to the kernel: a
// dense, contiguous float32 CPU tensor whose gradient is one too. Its state,
// once it has one, must be alike (it is unless replaced by hand).
bool cpu_adam_steps(const at::Tensor& param);

class CpuAdam : public torch::optim::Adam {
 public:
  explicit CpuAdam(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                   torch::optim::AdamOptions defaults = {}, CpuAdamOptions kernel = {})
      : torch::optim::Adam(groups, defaults), kernel_(kernel) {}
  explicit CpuAdam(std::vector<at::Tensor> params, torch::optim::AdamOptions defaults = {},
                   CpuAdamOptions kernel = {})
      : torch::optim::Adam(std::move(params), defaults), kernel_(kernel) {}

  // One update of every parameter with a gradient, as torch::optim::Adam::step.
  at::Tensor step(LossClosure closure = nullptr) override;

 private:
  CpuAdamOptions kernel_;
};

class CpuAdamW : public torch::optim::AdamW {
 public:
  explicit CpuAdamW(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                    torch::optim::AdamWOptions defaults = {}, CpuAdamOptions kernel = {})
      : torch::optim::AdamW(groups, defaults), kernel_(kernel) {}
  explicit CpuAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults = {},
                    CpuAdamOptions kernel = {})
      : torch::optim::AdamW(std::move(params), defaults), kernel_(kernel) {}

  // One update of every parameter with a gradient, as torch::optim::AdamW::step.
  at::Tensor step(LossClosure closure = nullptr) override;

 private:
  CpuAdamOptions kernel_;
};

}  // namespace tessera::runtime
