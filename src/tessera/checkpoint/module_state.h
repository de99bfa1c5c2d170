// Header-only bridge between torch::nn modules and checkpoint tensors (include it
// only from targets that use the torch frontend).
//
//   state.replicated = module_state(*model);           // parameters + buffers
//   load_module_state(*model, reader.replicated());     // checks, then copies in place
//   check_module_state(*model, tensors);                // only the checks
//
// Names are the module's dotted names ("h.0.attn.c_attn.weight"), optionally
// prefixed ("model.") to share a file with optimizer state.
#pragma once

#include <torch/torch.h>

#include <string>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/checkpoint_writer.h"
#include "tessera/core/check.h"

namespace tessera::checkpoint {

// find_tensor (checkpoint_reader.h) for a tensor the model needs.
inline const torch::Tensor& find_named(const NamedTensors& tensors, const std::string& name) {
  return find_tensor(tensors, name, " that the model needs; was it saved from a different model?");
}

inline NamedTensors module_state(const torch::nn::Module& module, const std::string& prefix = "") {
  NamedTensors out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    out.emplace_back(prefix + p.key(), p.value().detach());
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    out.emplace_back(prefix + b.key(), b.value().detach());
  }
  return out;
}

// Checks that `tensors` hold every parameter and buffer of `module` (names with
// `prefix`) in its shape, without changing anything. CheckpointError naming the
// first tensor that is missing or shaped differently; extra tensors are ignored.
inline void check_module_state(const torch::nn::Module& module, const NamedTensors& tensors,
                               const std::string& prefix = "") {
  auto check = [&](const std::string& name, const torch::Tensor& dst) {
    const torch::Tensor& src = find_named(tensors, prefix + name);
    TS_CHECK_T(CheckpointError, src.sizes() == dst.sizes(), "tensor '", prefix, name,
               "' has shape ", src.sizes(), " in the checkpoint but ", dst.sizes(),
               " in the model; check the model config");
  };
  for (const auto& p : module.named_parameters(true)) check(p.key(), p.value());
  for (const auto& b : module.named_buffers(true)) check(b.key(), b.value());
}

// Copies every parameter and buffer of `module` from `tensors` (names with
// `prefix`), after check_module_state: on error nothing is copied.
inline void load_module_state(torch::nn::Module& module, const NamedTensors& tensors,
                              const std::string& prefix = "") {
  check_module_state(module, tensors, prefix);
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters(true)) p.value().copy_(find_named(tensors, prefix + p.key()));
  for (auto& b : module.named_buffers(true)) b.value().copy_(find_named(tensors, prefix + b.key()));
}

}  // namespace tessera::checkpoint
