// Hugging Face GPT-2 checkpoints in and out of Tessera's GPT (models/gpt.h), in
// one process.
//
//   auto gpt = tessera::runtime::hf::load_gpt2("path/to/gpt2");   // config + weights
//   ... train ...
//   tessera::runtime::hf::export_gpt2(*gpt, "out/gpt2-tuned");
//   // Python: GPT2LMHeadModel.from_pretrained("out/gpt2-tuned")
//
// Import reads config.json (gpt2_config.h says what is accepted) and the
// safetensors files (hf_checkpoint.h: one file or shards with their index), maps
// GPT2LMHeadModel's names ("transformer.h.0.attn.c_attn.weight") or GPT2Model's
// (the same without "transformer.") onto the GPT's parameters, transposes
// GPT-2's Conv1D weights ([in, out]) into torch Linear's [out, in], and converts
// 16-bit files to the parameters' float32. Every tensor's presence and shape is
// checked before any parameter is written, so a refused checkpoint leaves the
// model as it was. The attention-mask buffers (attn.bias, attn.masked_bias) are
// skipped; any other tensor Tessera's GPT has no place for is an error.
//
// Export writes what GPT2LMHeadModel.save_pretrained writes: config.json, and
// model.safetensors (or shards with an index) with metadata {"format": "pt"}
// and Conv1D-transposed weights. A GPT without Linear biases (GPTConfig.bias
// false) is exported with zero biases, which computes the same function.
//
// Errors are CheckpointError naming the directory, the tensor or key, and the
// expected value. Not thread-safe for one model; distinct models may load at once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/models/gpt.h"
#include "tessera/runtime/hf/gpt2_config.h"
#include "tessera/runtime/hf/hf_checkpoint.h"

namespace tessera::runtime::hf {

// Builds a GPT from `dir`'s config.json and loads its weights. CheckpointError
// as described above.
models::GPT load_gpt2(const std::string& dir, const Gpt2ImportOptions& options = {});

// Loads `dir`'s weights into an existing GPT on any device. CheckpointError,
// with the model untouched, when its config differs from the checkpoint's in a
// field that shapes the weights or the forward (vocab_size, block_size,
// n_layer, n_head, n_embd, bias, gelu_tanh, layer_norm_eps: the message names
// the field and both values), or a tensor is missing, misshapen, not floating
// point, or unknown.
void load_gpt2_into(models::GPTImpl& model, const std::string& dir);

// The parameters one rank holds of a GPT of `config` (tensor and pipeline
// parallel layouts): `params` names them as the dense GPT does
// ("h.3.attn.c_attn.weight"), and `slice(name, whole)` cuts the whole tensor
// (a view of the memory-mapped file) to this rank's part, so a rank reads only
// the bytes it keeps. Tensors of other pipeline stages are checked, not read.
// The checks and errors of load_gpt2_into, plus a slice that does not fit its
// parameter; nothing is written unless every check passes.
using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;
using SliceFn = std::function<at::Tensor(const std::string& name, const at::Tensor& whole)>;
void load_gpt2_parameters(const models::GPTConfig& config, const NamedParameters& params,
                          const std::string& dir, const SliceFn& slice);

using Gpt2ExportOptions = HfExportOptions;  // max_shard_bytes, overwrite

// Writes `model` as a GPT2LMHeadModel directory at `dir`, atomically as
// export_hf_directory (hf_checkpoint.h) says. CheckpointError when `dir` exists,
// is not empty and overwrite is false, or on an I/O error; ConfigError if the
// model's config is invalid.
void export_gpt2(const models::GPTImpl& model, const std::string& dir,
                 const Gpt2ExportOptions& options = {});

}  // namespace tessera::runtime::hf
