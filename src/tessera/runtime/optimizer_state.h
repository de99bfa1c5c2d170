// Optimizer state <-> named tensors, for checkpoints that survive a change of
// parameter identity (a new process, a rebuilt model).
//
// LibTorch's own optimizer serialization keys state by TensorImpl address and
// restores it by position; here every entry is keyed by the parameter's dotted
// module name instead, e.g. "optim.h.0.attn.c_attn.weight.exp_avg", so a
// checkpoint can be inspected, reordered and (later) resharded by name.
//
//   Adam, AdamW: step (int64 scalar), exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad)
//   SGD:         momentum_buffer (when momentum is on and a step was taken)
//
// A parameter without state (no step taken yet) contributes nothing; loading
// clears such a parameter's state. Hyper-parameters (lr, betas, ...) are not
// stored: they come from the config, and the lr from the schedule.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <vector>

#include "tessera/checkpoint/checkpoint_writer.h"

namespace tessera::runtime {

// The parameters an optimizer steps, with their module names (same order).
struct NamedParams {
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
};

// Snapshot (detached references, not copies) of the state of `params`.
// CheckpointError for an optimizer type other than Adam, AdamW or SGD.
checkpoint::NamedTensors optimizer_state(torch::optim::Optimizer& optimizer,
                                         const NamedParams& params,
                                         const std::string& prefix = "optim.");

// The state read for every parameter (null: no step taken), validated and
// copied, but not installed yet.
struct StagedOptimizerState {
  std::vector<std::string> keys;  // the optimizer's state keys, one per parameter
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> states;
};

// Reads and checks the state of `params` from `tensors` without touching the
// optimizer: a missing tensor or one whose shape differs from its parameter's
// is a CheckpointError naming it.
StagedOptimizerState stage_optimizer_state(torch::optim::Optimizer& optimizer,
                                           const NamedParams& params,
                                           const checkpoint::NamedTensors& tensors,
                                           const std::string& prefix = "optim.");
// Replaces the state of the staged parameters. Cannot fail.
void install_optimizer_state(torch::optim::Optimizer& optimizer, StagedOptimizerState staged);

// stage + install: on error the optimizer keeps its state.
void load_optimizer_state(torch::optim::Optimizer& optimizer, const NamedParams& params,
                          const checkpoint::NamedTensors& tensors,
                          const std::string& prefix = "optim.");

}  // namespace tessera::runtime
