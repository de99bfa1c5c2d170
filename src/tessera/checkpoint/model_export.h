// The whole model of a committed checkpoint step as one safetensors file beside
// its shards: what DeepSpeed's stage3_gather_16bit_weights_on_model_save
// writes at each save, so a checkpoint saved in any layout (ZeRO shards,
// tensor-parallel pieces) also holds a model any tool reads without Tessera.
//
//   export_model_safetensors("ckpt/step_100", "model.", at::kBFloat16);
//   // -> ckpt/step_100/model.safetensors: "wte.weight", ... in bfloat16
//
// Reads the step through CheckpointReader (each tensor checked against its
// CRC-32C), reassembles every tensor named `prefix`..., converts floating-point
// ones to `dtype` (integer buffers keep theirs), and writes the file atomically
// (temporary name, fsync, rename: a crash leaves no partial file). The names
// lose the prefix. CheckpointError naming the step and the problem, e.g. when
// the step holds no tensor with the prefix.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace tessera::checkpoint {

inline constexpr const char* kModelExportName = "model.safetensors";

// Returns the file written.
std::string export_model_safetensors(const std::string& step_dir, const std::string& prefix,
                                     at::ScalarType dtype);

}  // namespace tessera::checkpoint
