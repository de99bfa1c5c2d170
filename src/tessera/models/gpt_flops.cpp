#include "tessera/models/gpt_flops.h"

namespace tessera::models {

GPTFlopCount gpt_flop_count(const GPTConfig& config) {
  config.validate();
  const int64_t C = config.n_embd, L = config.n_layer, V = config.vocab_size;
  // Per block: c_attn C×3C, attn.c_proj C×C, mlp.c_fc C×4C, mlp.c_proj 4C×C.
  int64_t mlp_weights = 8 * C * C, mlp_biases = 5 * C;
  if (config.moe.enabled()) {
    // What a token meets: the router (C×E), its k experts (C×F and F×C each)
    // and the shared expert (C×S and S×C): active parameters, not all experts.
    const auto& m = config.moe;
    const int64_t F = m.expert_width(C), S = m.shared_expert_intermediate_size;
    mlp_weights = C * m.num_experts + m.router_topk * 2 * C * F + 2 * C * S;
    mlp_biases = m.router_topk * (F + C) + (S > 0 ? S + C : 0);
  }
  const int64_t block_weights = 4 * C * C + mlp_weights;
  // Biases of those Linears (3C + C for attention) when the config has them;
  // ln_1 and ln_2 always have a gain and a bias (2C each).
  const int64_t block_vectors = (config.bias ? 4 * C + mlp_biases : 0) + 4 * C;
  GPTFlopCount n;
  n.n_layer = L;
  n.n_embd = C;
  n.block_params = L * (block_weights + block_vectors);
  n.matmul_weights = L * block_weights + V * C;
  n.flop_params = n.block_params + 2 * C /* ln_f */ + V * C /* wte, as the head */;
  return n;
}

double GPTFlopCount::train_flops_per_token(int64_t seq_len) const {
  return 6.0 * static_cast<double>(flop_params) + 12.0 * static_cast<double>(n_layer) *
                                                      static_cast<double>(n_embd) *
                                                      static_cast<double>(seq_len);
}

double GPTFlopCount::recompute_flops_per_token(int64_t seq_len) const {
  return 2.0 * static_cast<double>(block_params) + 4.0 * static_cast<double>(n_layer) *
                                                       static_cast<double>(n_embd) *
                                                       static_cast<double>(seq_len);
}

double GPTFlopCount::forward_matmul_flops(int64_t batch, int64_t seq_len) const {
  const double tokens = static_cast<double>(batch) * static_cast<double>(seq_len);
  return tokens * (2.0 * static_cast<double>(matmul_weights) + 4.0 * static_cast<double>(n_layer) *
                                                                   static_cast<double>(n_embd) *
                                                                   static_cast<double>(seq_len));
}

}  // namespace tessera::models
