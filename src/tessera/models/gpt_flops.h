// GPT FLOPs counted from its shapes: what `tessera train` divides by the step
// time for achieved FLOP/s and MFU, and what the flops profiler's count of one
// forward is checked against.
//
// Training FLOPs per token (forward + backward), PaLM's definition (Chowdhery
// et al. 2022, appendix B), for sequence length T:
//
//   6·Ψ + 12·L·C·T          L = n_layer, C = n_embd (heads × head size)
//
// Ψ is every parameter a token's arithmetic multiplies by: all parameters
// except the position table wpe, which is only looked up. The token embedding
// wte counts once, as the tied LM head (a [C, V] matmul per token); its lookup
// costs nothing. Each such parameter does one multiply-add forward and two in
// backward (input and weight gradients): 2 + 4 = 6 FLOPs per token. Biases and
// LayerNorm gains are in Ψ too, at 6 FLOPs each (a small overcount, as in
// Kaplan et al. and PaLM). 12·L·C·T is attention: per layer and token, q·kᵀ and
// probabilities·v are 2·T·C FLOPs each forward, times 3 for training. The full
// T×T score matrix is counted although the causal mask leaves half of it dead
// (and the fused kernel skips it): the convention PaLM and Megatron use, so
// that MFU compares across frameworks. Softmax, GELU, residual adds and the
// loss are not counted.
//
// With experts (GPTConfig::moe) Ψ counts the parameters a token meets — the
// router, its top-k experts and the shared expert — not every expert: the
// active parameters, as MoE papers report MFU.
//
// Model FLOPs do not depend on how the step is computed: activation
// checkpointing recomputes every block's forward in backward, which the
// hardware does (hardware FLOPs, HFU) but MFU leaves out.
//
// Pure functions of the config: no model is built. Thread-safe.
#pragma once

#include <cstdint>

#include "tessera/models/gpt.h"

namespace tessera::models {

struct GPTFlopCount {
  int64_t flop_params = 0;     // Ψ: all parameters but wpe (wte counted once, as the head)
  int64_t block_params = 0;    // parameters of the n_layer blocks (h.*)
  int64_t matmul_weights = 0;  // weight-matrix elements that multiply activations:
                               // the blocks' Linear weights and wte as the head
  int64_t n_layer = 0;
  int64_t n_embd = 0;

  // 6·Ψ + 12·L·C·T: model FLOPs of one training token (MFU's numerator).
  double train_flops_per_token(int64_t seq_len) const;
  // What activation checkpointing adds: one more forward of every block,
  // 2·block_params + 4·L·C·T per token (HFU = MFU's FLOPs plus these).
  double recompute_flops_per_token(int64_t seq_len) const;
  // The matmul FLOPs of one forward of `batch` sequences of `seq_len` tokens:
  // 2·matmul_weights per token for the Linears and the head, plus 4·L·C·T per
  // token for attention. This is what the flops profiler counts (it counts
  // matmuls, not bias adds), so the two must agree exactly.
  double forward_matmul_flops(int64_t batch, int64_t seq_len) const;
};

// The counts for a GPT built from `config` (ConfigError if it is invalid).
GPTFlopCount gpt_flop_count(const GPTConfig& config);

}  // namespace tessera::models
