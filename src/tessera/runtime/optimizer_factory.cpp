#include "tessera/runtime/optimizer_factory.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "tessera/core/check.h"

namespace tessera::runtime {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& c,
                                                        std::vector<at::Tensor> params) {
  if (c.type == "Adam") {
    auto o = torch::optim::AdamOptions(c.lr)
                 .betas({c.betas[0], c.betas[1]})
                 .eps(c.eps)
                 .weight_decay(c.weight_decay);
    return std::make_unique<torch::optim::Adam>(std::move(params), o);
  }
  if (c.type == "AdamW") {
    auto o = torch::optim::AdamWOptions(c.lr)
                 .betas({c.betas[0], c.betas[1]})
                 .eps(c.eps)
                 .weight_decay(c.weight_decay);
    return std::make_unique<torch::optim::AdamW>(std::move(params), o);
  }
  if (c.type == "SGD") {
    auto o = torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay);
    return std::make_unique<torch::optim::SGD>(std::move(params), o);
  }
  TS_THROW(ConfigError, "unknown optimizer type '", c.type, "': use Adam, AdamW or SGD");
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace tessera::runtime
