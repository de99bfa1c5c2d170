// Header-only bridge between torch::nn modules and checkpoint tensors (include it
// only from targets that use the torch frontend).
//
//   state.replicated = module_state(*model);           // parameters + buffers
//   load_module_state(*model, reader.replicated());     // copies in place
//
// Names are the module's dotted names ("h.0.attn.c_attn.weight"), optionally
// prefixed ("model.") to share a file with optimizer state.
#pragma once

#include <torch/torch.h>

#include <string>

#include "tessera/checkpoint/checkpoint_writer.h"
#include "tessera/core/check.h"

namespace tessera::checkpoint {

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

// Copies every parameter and buffer of `module` from `tensors` (names with
// `prefix`). CheckpointError naming the tensor if one is missing or its shape
// differs; extra tensors in `tensors` are ignored.
inline void load_module_state(torch::nn::Module& module, const NamedTensors& tensors,
                              const std::string& prefix = "") {
  torch::NoGradGuard no_grad;
  auto copy_into = [&](const std::string& name, torch::Tensor& dst) {
    const torch::Tensor* src = nullptr;
    for (const auto& t : tensors) {
      if (t.first == prefix + name) src = &t.second;
    }
    TS_CHECK_T(CheckpointError, src != nullptr, "checkpoint has no tensor '", prefix, name,
               "' that the model needs; was it saved from a different model?");
    TS_CHECK_T(CheckpointError, src->sizes() == dst.sizes(), "tensor '", prefix, name,
               "' has shape ", src->sizes(), " in the checkpoint but ", dst.sizes(),
               " in the model; check the model config");
    dst.copy_(*src);
  };
  for (auto& p : module.named_parameters(true)) copy_into(p.key(), p.value());
  for (auto& b : module.named_buffers(true)) copy_into(b.key(), b.value());
}

}  // namespace tessera::checkpoint
