// Optimizers for the Engine: built from the config's "optimizer" section, or by the
// user's own factory over parameter groups.
//
// From the config: Adam and AdamW map to Tessera's CpuAdam / CpuAdamW
// (cpu_adam_optimizer.h: a torch::optim::Adam / AdamW whose CPU float32
// parameters step through a vectorized kernel, with LibTorch's results up to
// one square root's rounding), or with
// torch_adam true to torch::optim::Adam / AdamW themselves (betas, eps,
// weight_decay, amsgrad); SGD to torch::optim::SGD (momentum, dampening, nesterov,
// weight_decay), Lamb to tessera::runtime::Lamb (lamb.h: betas, eps, weight_decay,
// max_coeff, min_coeff, bias_correction). With weight_decay > 0 and
// weight_decay_exclude patterns, the parameters whose names match any pattern go to
// a second group with weight decay 0
// (nanoGPT's and minGPT's recipe: no decay on biases, LayerNorms and embeddings).
//
// The returned optimizer owns nothing but its state; parameters are shared tensors.
#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/runtime/config.h"
#include "tessera/runtime/named_params.h"

namespace tessera::runtime {

// A user's optimizer factory, like DeepSpeed's `optimizer=callable`: called once
// with the parameter groups the engine built (their options, when set, are kept),
// it returns the optimizer over exactly those groups.
using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(
    std::vector<torch::optim::OptimizerParamGroup>)>;

// `*` matches any run of characters (dots included), `?` one character.
bool glob_match(const std::string& pattern, const std::string& text);

// One optimizer parameter group before the optimizer exists: its parameters with
// their names, and its options (null: the optimizer's defaults). ZeRO shards the
// parameters of each group before handing them to the optimizer.
struct ParamGroupSpec {
  NamedParams params;
  std::unique_ptr<torch::optim::OptimizerOptions> options;
};

// The config's split of `params`: parameters whose names match a
// weight_decay_exclude pattern (when weight_decay > 0) go to no_decay, the others
// to decay; the optimizer's groups are {decay, no_decay} without the empty ones.
// ConfigError if a pattern the config wrote matches no parameter: a typo would
// otherwise silently decay everything.
struct ConfigGroups {
  NamedParams decay;
  NamedParams no_decay;
};
ConfigGroups split_weight_decay(const OptimizerConfig& config, const NamedParams& params);

// The same split as parameter groups: {decay (default options), no_decay
// (weight_decay 0)}, leaving out empty groups (one empty group if all are).
std::vector<ParamGroupSpec> config_param_groups(const OptimizerConfig& config,
                                                const NamedParams& params);

// Builds the config's optimizer over `params` (groups as described above), or over
// given groups (the config's options are the defaults of groups without options).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        const NamedParams& params);
std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const OptimizerConfig& config, std::vector<torch::optim::OptimizerParamGroup> groups);

// Sets the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace tessera::runtime
