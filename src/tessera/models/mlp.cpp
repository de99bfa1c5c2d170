#include "tessera/models/mlp.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "tessera/core/check.h"

namespace tessera::models {

void MLPConfig::validate() const {
  TS_CHECK_T(ConfigError, in_features > 0, "MLPConfig.in_features must be > 0, got ", in_features);
  TS_CHECK_T(ConfigError, hidden > 0, "MLPConfig.hidden must be > 0, got ", hidden);
  TS_CHECK_T(ConfigError, out_features > 0, "MLPConfig.out_features must be > 0, got ",
             out_features);
  TS_CHECK_T(ConfigError, n_hidden_layers >= 1, "MLPConfig.n_hidden_layers must be >= 1, got ",
             n_hidden_layers);
}

MLPImpl::MLPImpl(const MLPConfig& config) : config_(config) {
  config_.validate();
  layers = register_module("layers", torch::nn::ModuleList());
  int64_t in = config.in_features;
  for (int64_t i = 0; i < config.n_hidden_layers; ++i) {
    layers->push_back(
        torch::nn::Linear(torch::nn::LinearOptions(in, config.hidden).bias(config.bias)));
    in = config.hidden;
  }
  layers->push_back(
      torch::nn::Linear(torch::nn::LinearOptions(in, config.out_features).bias(config.bias)));
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(config.seed);
  for (auto& p : named_parameters(true)) {
    auto& t = p.value();
    if (t.dim() == 1) {
      t.zero_();
    } else {
      t.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(t.size(1))), gen);
    }
  }
}

torch::Tensor MLPImpl::forward(torch::Tensor x) {
  const size_t n = layers->size();
  for (size_t i = 0; i < n; ++i) {
    x = layers[i]->as<torch::nn::Linear>()->forward(x);
    if (i + 1 < n) x = torch::gelu(x);
  }
  return x;
}

}  // namespace tessera::models
