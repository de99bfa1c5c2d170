// Builds a LibTorch optimizer from the config's "optimizer" section.
//
// Adam and AdamW map to torch::optim::Adam / AdamW (betas, eps, weight_decay),
// SGD to torch::optim::SGD (momentum, weight_decay). The returned optimizer owns
// nothing but its state; the parameters are shared tensors.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "tessera/runtime/config.h"

namespace tessera::runtime {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<at::Tensor> params);

// Sets the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace tessera::runtime
