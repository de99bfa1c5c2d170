// Hugging Face Llama checkpoints in and out of Tessera's Llama (models/llama.h),
// in one process.
//
//   auto llama = tessera::runtime::hf::load_llama("path/to/llama");   // config + weights
//   ... train ...
//   tessera::runtime::hf::export_llama(*llama, "out/llama-tuned");
//   // Python: LlamaForCausalLM.from_pretrained("out/llama-tuned")
//
// Import reads config.json (llama_config.h says what is accepted) and the
// safetensors files (hf_checkpoint.h: one file or shards with their index). The
// checkpoint's names are Tessera's parameter names (model.layers.0.self_attn.
// q_proj.weight, ...), and 16-bit files are converted to the parameters'
// float32. Every tensor's presence, shape and dtype is checked before any
// parameter is written, so a refused checkpoint leaves the model as it was. A
// tied model's file may carry lm_head.weight (transformers ignores it, and so
// does Tessera); old files' rotary_emb.inv_freq buffers are skipped; any other
// tensor Tessera's Llama has no place for is an error.
//
// Export writes what LlamaForCausalLM.save_pretrained writes: config.json, and
// model.safetensors (or shards with an index) with metadata {"format": "pt"},
// without lm_head.weight when the head is tied.
//
// Errors are CheckpointError naming the directory, the tensor or key, and the
// expected value. Not thread-safe for one model; distinct models may load at once.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/models/llama.h"
#include "tessera/runtime/hf/hf_checkpoint.h"
#include "tessera/runtime/hf/llama_config.h"

namespace tessera::runtime::hf {

// Builds a Llama from `dir`'s config.json and loads its weights.
// CheckpointError as described above.
models::Llama load_llama(const std::string& dir);

// Loads `dir`'s weights into an existing Llama on any device. CheckpointError,
// with the model untouched, when its config differs from the checkpoint's in a
// field that shapes the weights or the forward (the message names the field and
// both values), or a tensor is missing, misshapen, not floating point, or
// unknown.
void load_llama_into(models::LlamaImpl& model, const std::string& dir);

// The parameters one rank holds of a Llama of `config` (tensor and pipeline
// parallel layouts): `params` names them as the dense Llama does
// ("model.layers.3.self_attn.q_proj.weight"), and `slice(name, whole)` cuts the
// whole tensor (a view of the memory-mapped file) to this rank's part, so a
// rank reads only the bytes it keeps. Tensors of other pipeline stages are
// checked, not read. The checks and errors of load_llama_into, plus a slice
// that does not fit its parameter; nothing is written unless every check passes.
using LlamaNamedParameters = std::vector<std::pair<std::string, at::Tensor>>;
using LlamaSliceFn = std::function<at::Tensor(const std::string& name, const at::Tensor& whole)>;
void load_llama_parameters(const models::LlamaConfig& config, const LlamaNamedParameters& params,
                           const std::string& dir, const LlamaSliceFn& slice);

using LlamaExportOptions = HfExportOptions;  // max_shard_bytes, overwrite

// Writes `model` as a LlamaForCausalLM directory at `dir`, atomically as
// export_hf_directory (hf_checkpoint.h) says. CheckpointError when `dir` exists,
// is not empty and overwrite is false, or on an I/O error; ConfigError if the
// model's config is invalid.
void export_llama(const models::LlamaImpl& model, const std::string& dir,
                  const LlamaExportOptions& options = {});

}  // namespace tessera::runtime::hf
