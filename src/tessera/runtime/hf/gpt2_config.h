// GPT-2's config.json (Hugging Face `GPT2Config`) to Tessera's GPTConfig and
// back, and the list of tensors a GPT-2 checkpoint holds.
//
// A config is accepted only when Tessera's GPT computes exactly what
// transformers' GPT2LMHeadModel computes with it; anything else is refused with
// a CheckpointError naming the key, its value and what is supported, because a
// silently different model is worse than no model. Keys GPT2Config lacks in a
// file take GPT2Config's defaults, as transformers does. Keys that do not change
// the forward (tokenizer ids, generation settings, summary_* of the
// double-heads model) are ignored.
//
// Pure functions of their arguments; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/models/gpt.h"

namespace tessera::runtime::hf {

struct Gpt2ImportOptions {
  // GPTConfig.fused_attention of the loaded model (same math either way).
  bool fused_attention = true;
  // GPTConfig.dropout. Unset: the config's resid_pdrop, embd_pdrop and
  // attn_pdrop, which must then be equal (Tessera's GPT has one dropout rate).
  std::optional<double> dropout;
};

struct Gpt2HfConfig {
  models::GPTConfig model;
  // config.json's tie_word_embeddings. false: the file's lm_head.weight must
  // equal wte.weight, since Tessera's head is always tied.
  bool tie_word_embeddings = true;
};

// Parses `config_json` (the text of config.json; `where` names it in errors).
// CheckpointError when it is not a JSON object, model_type is not "gpt2",
// architectures names a class other than GPT2LMHeadModel or GPT2Model,
// activation_function is not a GELU (gelu_new, gelu_pytorch_tanh, gelu_fast:
// the tanh form; gelu: the exact form), n_inner is neither null nor 4 * n_embd,
// scale_attn_weights is false, scale_attn_by_inverse_layer_idx or
// add_cross_attention is true, a size is not a positive integer, or the
// dropouts differ and options.dropout is unset.
Gpt2HfConfig parse_gpt2_config(const std::string& config_json, const std::string& where,
                               const Gpt2ImportOptions& options = {});

// parse_gpt2_config of `dir`/config.json; CheckpointError if it cannot be read.
Gpt2HfConfig read_gpt2_config(const std::string& dir, const Gpt2ImportOptions& options = {});

// config.json for `config`, as transformers writes it for a GPT2LMHeadModel
// (model_type gpt2, architectures, tied embeddings, float32). ConfigError if
// the config is invalid.
std::string gpt2_config_json(const models::GPTConfig& config);

// One tensor of a GPT-2 checkpoint.
struct Gpt2Tensor {
  // Its name in a GPT2Model file ("h.0.attn.c_attn.weight"); GPT2LMHeadModel
  // files prefix it with "transformer.". It is also the name of Tessera's GPT
  // parameter that holds it.
  std::string name;
  std::vector<int64_t> hf_shape;  // its shape in the file
  // GPT-2's Conv1D weights are stored [in, out]: the transpose of torch
  // Linear's [out, in] that Tessera's parameter has.
  bool transposed = false;
  // A Linear bias: absent from Tessera's GPT when GPTConfig.bias is false.
  bool linear_bias = false;
};

// Every parameter tensor of GPT-2 for `config`, in save_pretrained's order:
// wte, wpe, each block's ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
// mlp.c_proj (weight, bias), then ln_f. Excludes lm_head.weight (tied to wte)
// and the attention-mask buffers attn.bias and attn.masked_bias.
std::vector<Gpt2Tensor> gpt2_tensors(const models::GPTConfig& config);

}  // namespace tessera::runtime::hf
