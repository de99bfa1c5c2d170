#include "tessera/runtime/optimizer_factory.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "tessera/core/check.h"
#include "tessera/runtime/cpu_adam_optimizer.h"
#include "tessera/runtime/lamb.h"

namespace tessera::runtime {
namespace {

using torch::optim::OptimizerParamGroup;

// The config's options for its optimizer type, with the given weight decay.
std::unique_ptr<torch::optim::OptimizerOptions> config_options(const OptimizerConfig& c,
                                                               double weight_decay) {
  if (c.type == "Adam") {
    return std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(c.lr)
                                                           .betas({c.betas[0], c.betas[1]})
                                                           .eps(c.eps)
                                                           .weight_decay(weight_decay)
                                                           .amsgrad(c.amsgrad));
  }
  if (c.type == "AdamW") {
    return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(c.lr)
                                                            .betas({c.betas[0], c.betas[1]})
                                                            .eps(c.eps)
                                                            .weight_decay(weight_decay)
                                                            .amsgrad(c.amsgrad));
  }
  if (c.type == "SGD") {
    return std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(c.lr)
                                                          .momentum(c.momentum)
                                                          .dampening(c.dampening)
                                                          .nesterov(c.nesterov)
                                                          .weight_decay(weight_decay));
  }
  if (c.type == "Lamb") {
    return std::make_unique<LambOptions>(LambOptions(c.lr)
                                             .betas({c.betas[0], c.betas[1]})
                                             .eps(c.eps)
                                             .weight_decay(weight_decay)
                                             .max_coeff(c.max_coeff)
                                             .min_coeff(c.min_coeff)
                                             .bias_correction(c.bias_correction));
  }
  TS_THROW(ConfigError, "unknown optimizer type '", c.type, "': use Adam, AdamW, SGD or Lamb");
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& text) {
  // Iterative wildcard match with one backtrack point: linear in practice.
  size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

ConfigGroups split_weight_decay(const OptimizerConfig& c, const NamedParams& params) {
  ConfigGroups g;
  const bool split = c.weight_decay > 0 && !c.weight_decay_exclude.empty();
  std::vector<bool> used(c.weight_decay_exclude.size(), false);
  for (size_t i = 0; i < params.params.size(); ++i) {
    bool excluded = false;
    for (size_t k = 0; split && k < c.weight_decay_exclude.size(); ++k) {
      if (glob_match(c.weight_decay_exclude[k], params.names[i])) excluded = used[k] = true;
    }
    NamedParams& dst = excluded ? g.no_decay : g.decay;
    dst.names.push_back(params.names[i]);
    dst.params.push_back(params.params[i]);
  }
  // Only patterns the user wrote must match: a default list may name layers a
  // model does not have (biases of a bias-free GPT).
  for (size_t k = 0; split && c.weight_decay_exclude_set && k < used.size(); ++k) {
    TS_CHECK_T(ConfigError, used[k], "config 'optimizer.params.weight_decay_exclude' pattern '",
               c.weight_decay_exclude[k], "' matches no trainable parameter; parameter names "
               "look like '", params.names.empty() ? std::string("fc.weight") : params.names[0],
               "' (`*` matches any characters)");
  }
  return g;
}

std::vector<ParamGroupSpec> config_param_groups(const OptimizerConfig& c,
                                                const NamedParams& params) {
  ConfigGroups g = split_weight_decay(c, params);
  std::vector<ParamGroupSpec> groups;
  if (!g.decay.params.empty()) groups.push_back({std::move(g.decay), nullptr});
  if (!g.no_decay.params.empty()) {
    groups.push_back({std::move(g.no_decay), config_options(c, /*weight_decay=*/0.0)});
  }
  // A model without trainable parameters still gets a (stepless) optimizer.
  if (groups.empty()) groups.push_back({NamedParams{}, nullptr});
  return groups;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& c,
                                                        const NamedParams& params) {
  std::vector<OptimizerParamGroup> groups;
  for (auto& spec : config_param_groups(c, params)) {
    if (spec.options) {
      groups.emplace_back(spec.params.params, std::move(spec.options));
    } else {
      groups.emplace_back(spec.params.params);
    }
  }
  return make_optimizer(c, std::move(groups));
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& c,
                                                        std::vector<OptimizerParamGroup> groups) {
  auto defaults = config_options(c, c.weight_decay);
  // torch_adam: LibTorch's own step; else Tessera's CPU Adam for CPU float32
  // parameters, LibTorch's step for the others (cpu_adam_optimizer.h).
  if (c.type == "Adam") {
    const auto& o = static_cast<torch::optim::AdamOptions&>(*defaults);
    if (c.torch_adam) return std::make_unique<torch::optim::Adam>(std::move(groups), o);
    return std::make_unique<CpuAdam>(std::move(groups), o);
  }
  if (c.type == "AdamW") {
    const auto& o = static_cast<torch::optim::AdamWOptions&>(*defaults);
    if (c.torch_adam) return std::make_unique<torch::optim::AdamW>(std::move(groups), o);
    return std::make_unique<CpuAdamW>(std::move(groups), o);
  }
  if (c.type == "Lamb") {
    return std::make_unique<Lamb>(std::move(groups), static_cast<LambOptions&>(*defaults));
  }
  return std::make_unique<torch::optim::SGD>(std::move(groups),
                                             static_cast<torch::optim::SGDOptions&>(*defaults));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace tessera::runtime
