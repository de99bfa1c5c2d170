// Llama's config.json (Hugging Face `LlamaConfig`) to Tessera's LlamaConfig and
// back, and the list of tensors a LlamaForCausalLM checkpoint holds.
//
// A config is accepted only when Tessera's Llama computes exactly what
// transformers' LlamaForCausalLM computes with it; anything else is refused with
// a CheckpointError naming the key, its value and what is supported: model_type
// other than "llama", an architecture other than LlamaForCausalLM, hidden_act
// other than "silu", rope_scaling of a type other than "default", "linear" or
// "llama3" (or one missing a field its type needs), a nonzero attention_dropout,
// or a size that is not a positive integer. Keys a file lacks take LlamaConfig's
// defaults, as transformers does (num_key_value_heads: num_attention_heads;
// head_dim: hidden_size / num_attention_heads). Keys that do not change the
// forward (token ids, torch_dtype, pretraining_tp, use_cache) are ignored.
//
// Pure functions of their arguments; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/models/llama.h"

namespace tessera::runtime::hf {

// Parses `config_json` (the text of config.json; `where` names it in errors).
// The result's seed is LlamaConfig's default (weights come from the checkpoint).
models::LlamaConfig parse_llama_config(const std::string& config_json, const std::string& where);

// parse_llama_config of `dir`/config.json; CheckpointError if it cannot be read.
models::LlamaConfig read_llama_config(const std::string& dir);

// config.json for `config`, as transformers writes it for a LlamaForCausalLM
// (model_type llama, float32). ConfigError if the config is invalid.
std::string llama_config_json(const models::LlamaConfig& config);

// One tensor of a Llama checkpoint: its name (also the name of Tessera's Llama
// parameter that holds it) and shape.
struct LlamaTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// Every parameter tensor of LlamaForCausalLM for `config`, in save_pretrained's
// order: model.embed_tokens, each layer's self_attn.{q,k,v,o}_proj,
// mlp.{gate,up,down}_proj (weight, then bias when configured),
// input_layernorm, post_attention_layernorm, then model.norm and, untied,
// lm_head.weight.
std::vector<LlamaTensor> llama_tensors(const models::LlamaConfig& config);

}  // namespace tessera::runtime::hf
