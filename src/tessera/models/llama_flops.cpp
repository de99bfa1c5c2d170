#include "tessera/models/llama_flops.h"

namespace tessera::models {

GPTFlopCount llama_flop_count(const LlamaConfig& config) {
  config.validate();
  const int64_t C = config.hidden_size, I = config.intermediate_size, V = config.vocab_size;
  const int64_t q = config.num_attention_heads * config.effective_head_dim();
  const int64_t kv = config.num_key_value_heads * config.effective_head_dim();
  const int64_t attn_weights = C * q + 2 * C * kv + q * C;
  const int64_t mlp_weights = 3 * C * I;
  const int64_t vectors = (config.attention_bias ? q + 2 * kv + C : 0) +
                          (config.mlp_bias ? 2 * I + C : 0) + 2 * C /* the two norms */;
  GPTFlopCount n;
  n.n_layer = config.num_hidden_layers;
  n.n_embd = q;
  n.block_params = n.n_layer * (attn_weights + mlp_weights + vectors);
  n.matmul_weights = n.n_layer * (attn_weights + mlp_weights) + V * C;
  n.flop_params = n.block_params + C /* model.norm */ + V * C /* the head */;
  return n;
}

}  // namespace tessera::models
