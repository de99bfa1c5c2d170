// Llama FLOPs counted from its shapes, in the GPT's terms (gpt_flops.h: 6·Ψ +
// 12·L·C·T per training token), so `tessera train` reports achieved FLOP/s and
// MFU for a Llama the way it does for the GPT.
//
// Ψ is every parameter a token's arithmetic multiplies by: the layers' weights
// (q, k, v, o, gate, up, down projections, biases and norms), the final norm and
// the head (vocab_size × hidden_size). The embedding is a lookup and is left
// out when the head is untied; tied, it counts once, as the head. C in the
// attention term is the attention width, num_attention_heads × head_dim: with
// grouped-query attention the scores and weighted values still cost 2·T·C each
// per token and layer. RoPE, SiLU, the gating product and RMSNorm's arithmetic
// are not counted, like GELU and LayerNorm's in the GPT.
//
// Pure function of the config: no model is built. Thread-safe.
#pragma once

#include "tessera/models/gpt_flops.h"
#include "tessera/models/llama.h"

namespace tessera::models {

// The counts for a Llama built from `config` (ConfigError if it is invalid).
// n_embd holds the attention width, n_layer num_hidden_layers.
GPTFlopCount llama_flop_count(const LlamaConfig& config);

}  // namespace tessera::models
