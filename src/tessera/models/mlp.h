// MLP: a small fully connected network (Linear-GELU-...-Linear), the model the DDP
// and ZeRO parity tests train, since its gradients are cheap and exactly
// reproducible.
//
// Weights are drawn from a private generator seeded with config.seed (Linear
// weights ~ N(0, 1/sqrt(fan_in)), biases zero), so every rank builds the same
// model without touching the global RNG. Not thread-safe; an ordinary module.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace tessera::models {

struct MLPConfig {
  int64_t in_features = 16;
  int64_t hidden = 32;
  int64_t out_features = 4;
  int64_t n_hidden_layers = 2;  // number of hidden Linear+GELU layers (>= 1)
  bool bias = true;
  uint64_t seed = 1234;
  void validate() const;  // ConfigError naming the field
};

class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const MLPConfig& config);
  // x: [..., in_features] -> [..., out_features].
  torch::Tensor forward(torch::Tensor x);
  const MLPConfig& config() const { return config_; }

  torch::nn::ModuleList layers{nullptr};  // Linear modules, GELU between them

 private:
  MLPConfig config_;
};
TORCH_MODULE(MLP);

}  // namespace tessera::models
