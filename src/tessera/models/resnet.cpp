#include "tessera/models/resnet.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "tessera/core/check.h"

namespace tessera::models {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel)
                               .stride(stride)
                               .padding(kernel / 2)
                               .bias(false));
}

}  // namespace

void ResNetConfig::validate() const {
  TS_CHECK_T(ConfigError, in_channels > 0, "model.in_channels must be positive, got ", in_channels);
  TS_CHECK_T(ConfigError, num_classes > 1, "model.num_classes must be at least 2, got ", num_classes);
  TS_CHECK_T(ConfigError, !widths.empty(), "model.widths must list at least one stage width");
  for (int64_t w : widths) {
    TS_CHECK_T(ConfigError, w > 0, "model.widths must be positive, got ", w);
  }
  TS_CHECK_T(ConfigError, blocks_per_stage > 0, "model.blocks_per_stage must be positive, got ",
             blocks_per_stage);
}

BasicBlockImpl::BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
  body = register_module("body", torch::nn::Sequential(conv(in, out, 3, stride), torch::nn::BatchNorm2d(out),
                                                       torch::nn::ReLU(), conv(out, out, 3, 1),
                                                       torch::nn::BatchNorm2d(out)));
  shortcut = register_module("shortcut", torch::nn::Sequential());
  if (stride != 1 || in != out) {
    shortcut->push_back(conv(in, out, 1, stride));
    shortcut->push_back(torch::nn::BatchNorm2d(out));
  }
}

torch::Tensor BasicBlockImpl::forward(const torch::Tensor& x) {
  const auto skip = shortcut->is_empty() ? x : shortcut->forward(x);
  return torch::relu(body->forward(x) + skip);
}

ResNetImpl::ResNetImpl(const ResNetConfig& config) : config_(config) {
  config_.validate();
  const auto& w = config_.widths;
  stem = register_module("stem", torch::nn::Sequential(conv(config_.in_channels, w[0], 3, 1),
                                                       torch::nn::BatchNorm2d(w[0]),
                                                       torch::nn::ReLU()));
  stages = register_module("stages", torch::nn::Sequential());
  int64_t in = w[0];
  for (size_t s = 0; s < w.size(); ++s) {
    for (int64_t b = 0; b < config_.blocks_per_stage; ++b) {
      stages->push_back(BasicBlock(in, w[s], s > 0 && b == 0 ? 2 : 1));
      in = w[s];
    }
  }
  fc = register_module("fc", torch::nn::Linear(in, config_.num_classes));
  // Deterministic weights from the config's seed, whatever the global RNG holds.
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(config_.seed);
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      const auto& k = c->weight.sizes();
      const double fan_out = static_cast<double>(k[0] * k[2] * k[3]);
      c->weight.normal_(0.0, std::sqrt(2.0 / fan_out), gen);
    } else if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      bn->weight.fill_(1.0);
      bn->bias.zero_();
    } else if (auto* l = m->as<torch::nn::Linear>()) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(l->weight.size(1)));
      l->weight.uniform_(-bound, bound, gen);
      l->bias.uniform_(-bound, bound, gen);
    }
  }
}

torch::Tensor ResNetImpl::forward(const torch::Tensor& x) {
  auto h = stages->forward(stem->forward(x));
  return fc->forward(h.mean({2, 3}));
}

torch::Tensor ResNetImpl::loss(const torch::Tensor& x, const torch::Tensor& labels) {
  return torch::cross_entropy_loss(forward(x), labels);
}

int64_t ResNetImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace tessera::models
