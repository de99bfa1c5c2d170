// `tessera train` with model.type "llama": the Llama of models/llama.h trained by
// the same loop, data and data-parallel Engine (DDP or ZeRO) as the GPT.
//
// The model section takes LlamaConfig's fields under transformers' names
// (vocab_size, hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads, head_dim, max_position_embeddings,
// rms_norm_eps, rope_theta, rope_scaling, tie_word_embeddings, attention_bias,
// mlp_bias, initializer_range), plus seed, block_size (the training sequence
// length: at most max_position_embeddings, default the smaller of it and 256)
// and init_from_hf: a Hugging Face LlamaForCausalLM directory whose config.json
// gives the sizes (the section then takes no size keys) and whose weights every
// rank loads before training.
//
// Tensor and pipeline parallelism (tensor_model_parallel_size,
// pipeline_model_parallel_size, sequence_parallel) train it through the
// ModelParallelEngine; init_from_hf then reads only each rank's slices. Not yet
// supported for a Llama, each a ConfigError before the job starts: bf16/fp16
// and activation checkpointing.
#pragma once

#include <string>
#include <vector>

#include "tessera/cli/commands/train_settings.h"
#include "tessera/models/llama.h"
#include "tessera/runtime/config.h"

namespace tessera::cli {

// Fills s.llama, s.init_from_hf, and s.model's block_size and vocab_size (what
// the data and the loop read) from cfg.model; s.data_path must be set already.
// ConfigError on an unknown key, a bad value, or an unsupported combination;
// CheckpointError when init_from_hf's config.json is refused.
void read_llama_settings(const runtime::Config& cfg, TrainSettings& s);

// The Llama s.llama describes, with s.init_from_hf's weights when it is set.
models::Llama build_llama(const TrainSettings& s);

// Parameters of the Llama that get no weight decay unless the config's
// optimizer.params.weight_decay_exclude says otherwise: norms, biases and the
// embedding.
const std::vector<std::string>& llama_no_weight_decay();

}  // namespace tessera::cli
