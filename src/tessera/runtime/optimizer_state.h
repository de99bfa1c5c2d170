// Optimizer state <-> named tensors, for checkpoints that survive a change of
// parameter identity (a new process, a rebuilt model).
//
// LibTorch's own optimizer serialization keys state by TensorImpl address and
// restores it by position; for the optimizers whose state Tessera knows, every
// entry is keyed by the parameter's dotted module name instead, e.g.
// "optim.h.0.attn.c_attn.weight.exp_avg", so a checkpoint can be inspected,
// reordered and resharded by name:
//
//   Adam, AdamW: step (int64 scalar), exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad)
//   SGD:         momentum_buffer (when momentum is on and a step was taken)
//   Lamb:        step (int64 scalar), exp_avg, exp_avg_sq (lamb.h)
//
// Any other optimizer (RMSprop, Adagrad, LBFGS, a user's own class) is stored whole
// through its LibTorch save()/load() as one uint8 tensor "optim.__archive__"; it is
// restored by parameter position, so the model and the optimizer's parameter
// groups must be built in the same order. A user class must implement save() and
// load() for its state to survive.
//
// A parameter without state (no step taken yet) contributes nothing; loading
// clears such a parameter's state. Hyper-parameters (lr, betas, ...) are not
// stored: they come from the config or the user's code, the lr from the schedule.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <vector>

#include "tessera/checkpoint/checkpoint_writer.h"
#include "tessera/runtime/named_params.h"

namespace tessera::runtime {

// "Adam", "AdamW", "SGD", "Lamb", "RMSprop", "Adagrad", "LBFGS", or the C++ type name of a
// user's optimizer class. Checkpoints record it; a load into another type fails.
// Tessera's CpuAdam and CpuAdamW (cpu_adam_optimizer.h) are "Adam" and "AdamW",
// their state stored as LibTorch's: either loads the other's checkpoints.
std::string optimizer_type_name(const torch::optim::Optimizer& optimizer);

// Bytes of the optimizer's state tensors (each storage once): Adam's, AdamW's and
// Lamb's moments, SGD's momentum buffers, RMSprop's and Adagrad's accumulators. 0
// for other optimizers (their state is opaque).
int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

// Snapshot (detached references, not copies) of the state of `params`.
checkpoint::NamedTensors optimizer_state(torch::optim::Optimizer& optimizer,
                                         const NamedParams& params,
                                         const std::string& prefix = "optim.");

// The state read for every parameter (null: no step taken), validated and
// copied, but not installed yet.
struct StagedOptimizerState {
  std::vector<void*> keys;  // the optimizer's state keys (TensorImpl addresses), one per parameter
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> states;
  std::string archive;  // for optimizers stored whole (see above)
};

// Reads and checks the state of `params` from `tensors` without touching the
// optimizer: a missing tensor or one whose shape differs from its parameter's
// is a CheckpointError naming it.
StagedOptimizerState stage_optimizer_state(torch::optim::Optimizer& optimizer,
                                           const NamedParams& params,
                                           const checkpoint::NamedTensors& tensors,
                                           const std::string& prefix = "optim.");
// Replaces the state of the staged parameters. Cannot fail for the named
// optimizers; for an archived one it is the optimizer's own load(), which
// throws CheckpointError if the archive does not fit its parameter groups.
void install_optimizer_state(torch::optim::Optimizer& optimizer, StagedOptimizerState staged);

// --- One parameter's state as plain fields --------------------------------------
// For state kept outside the optimizer between steps (nvme offload streams it
// through the optimizer one piece of a shard at a time, runtime/offload):
//   Adam, AdamW: exp_avg, exp_avg_sq and, with amsgrad, max_exp_avg_sq; a step count
//   SGD:         momentum_buffer when the group's momentum is not 0; no step count
// Any other optimizer: ConfigError naming its type.
std::vector<std::string> param_state_fields(const torch::optim::Optimizer& optimizer,
                                            const torch::optim::OptimizerOptions& group);
// Gives `param` this state; the tensors are used as they are (not copied), so the
// optimizer's next step updates them in place.
void put_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param, int64_t step,
                     const std::vector<at::Tensor>& fields);
// Removes `param`'s state from the optimizer and returns it (fields in
// param_state_fields order); false when it has none.
bool take_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                      int64_t* step, std::vector<at::Tensor>* fields);

// stage + install: on error a named optimizer keeps its state.
void load_optimizer_state(torch::optim::Optimizer& optimizer, const NamedParams& params,
                          const checkpoint::NamedTensors& tensors,
                          const std::string& prefix = "optim.");

}  // namespace tessera::runtime
