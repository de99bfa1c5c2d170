// Helpers for the data-parallel tests: a small deterministic MLP, parameter
// copying and max-abs-diff reporting.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <memory>

namespace tessera::testing {

// Linear(in, hidden) -> tanh -> Linear(hidden, hidden) -> tanh -> Linear(hidden, out).
struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t in, int64_t hidden, int64_t out)
      : fc1(register_module("fc1", torch::nn::Linear(in, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, hidden))),
        fc3(register_module("fc3", torch::nn::Linear(hidden, out))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::tanh(fc2(torch::tanh(fc1(x)))));
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

inline void copy_params(torch::nn::Module& dst, const torch::nn::Module& src) {
  torch::NoGradGuard g;
  auto d = dst.named_parameters(true);
  for (const auto& kv : src.named_parameters(true)) d[kv.key()].copy_(kv.value());
}

inline double max_abs_diff(const torch::nn::Module& a, const torch::nn::Module& b) {
  double m = 0;
  auto pb = b.named_parameters(true);
  for (const auto& kv : a.named_parameters(true)) {
    m = std::max(m, (kv.value() - pb[kv.key()]).abs().max().item<double>());
  }
  return m;
}

// Deterministic data for step `step`: [rows, cols] from a private generator.
inline torch::Tensor data_for(int64_t step, int64_t rows, int64_t cols, int salt) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(step * 1000 + salt));
  return at::randn({rows, cols}, gen);
}

}  // namespace tessera::testing
