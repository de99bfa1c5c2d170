// What the data-parallel Engine and the ModelParallelEngine share about their
// checkpoints (engine_checkpoint.cpp, model_parallel/model_parallel_checkpoint.cpp):
// the format version, each rank's CPU RNG state, choosing one step for every
// rank, the metadata checks, and turning any rank's failure into one
// CheckpointError on every rank. Internal to the runtime layer.
#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/coordinator.h"
#include "tessera/checkpoint/sharded_tensors.h"

namespace tessera::runtime {

inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr const char* kCheckpointRngName = "rng.cpu";

// The default CPU generator's state, and setting it back.
at::Tensor cpu_rng_state();
void set_cpu_rng_state(const at::Tensor& state);
// Rank `rank`'s saved RNG state, read alone (not the rest of its file).
at::Tensor saved_rng(const checkpoint::CheckpointReader& reader, int rank);

// Collective: rank 0 resolves `dir` (a root: its newest verified step; or one
// step directory) and every rank gets the same step directory, or the same
// CheckpointError.
std::string agree_on_step(const std::string& dir, checkpoint::Coordinator& coordinator);

// CheckpointError unless the metadata has this build's format and `optimizer`'s
// type name.
void check_checkpoint_metadata(const nlohmann::json& metadata, const std::string& step_dir,
                               const std::string& optimizer);

// CheckpointError unless the checkpoint's `tensor` has the model's shape; checked
// from the index, before any byte of it is read.
void check_saved_shape(const checkpoint::CheckpointTensors& all, const std::string& tensor,
                       at::IntArrayRef model);

// Collective: every rank passes its error ("" if none); throws the same
// CheckpointError on every rank naming each failed rank when any failed.
void raise_if_any_failed(checkpoint::Coordinator& coordinator, const std::string& error,
                         const std::string& step_dir);

}  // namespace tessera::runtime
