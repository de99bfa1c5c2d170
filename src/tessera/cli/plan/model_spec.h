// ModelSpec: the transformer `tessera plan` sizes, as the numbers its formulas
// need (layers l, hidden size h, heads a, sequence s, vocabulary V) and the
// parameter count split into what sits in the blocks and what sits outside them.
//
// The count is exact for Tessera's GPT (models/gpt.h): per block 12h² weights,
// 4h of LayerNorm weights and biases and 9h of Linear biases (none with
// bias = false), a token and a position embedding, a final LayerNorm, and a
// head tied to the token embedding. A model given by its parameter count keeps the user's total and
// puts the embeddings outside the blocks, the rest evenly in them.
// A mixture-of-experts GPT (experts > 0, models/moe.h) has in each block, in
// place of the MLP, a router (h x E) and E experts of width F (each 2hF
// weights, F + h biases), every token going to topk of them: the FLOPs count
// the topk experts a token meets, the parameters all E.
// Pure values; no threads, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::cli::plan {

struct ModelSpec {
  std::string name;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t seq = 0;
  int64_t vocab = 0;
  bool bias = true;
  // A total given by the user (0: count it from the shape).
  int64_t total_params_override = 0;
  // Mixture of experts (0: the dense MLP).
  int64_t experts = 0;
  int64_t topk = 2;
  int64_t expert_hidden = 0;  // F; 0: 4 x hidden
  bool moe() const { return experts > 0; }
  int64_t expert_width() const { return expert_hidden > 0 ? expert_hidden : 4 * hidden; }
  // Parameters of one block's experts (what expert parallelism splits); 0 if dense.
  int64_t block_expert_params() const;

  // Parameters of one block (what ZeRO-3 gathers at once: a block is a unit).
  int64_t block_params() const;
  // Of a block, the elements of tensors smaller than `threshold` (biases and
  // LayerNorm): ZeRO-3 keeps them whole (stage3_param_persistence_threshold).
  int64_t block_small_params(int64_t threshold) const;
  // Token and position embeddings and the final LayerNorm.
  int64_t outside_params() const;
  int64_t total_params() const;

  // Floating-point operations of one training step (forward and backward) on
  // `sequences` sequences: 72·s·l·h²·(1 + s/(6h) + V/(12·l·h)) per sequence
  // (Narayanan et al. 2021, without recomputation); with full recomputation the
  // blocks' forward runs twice: 96 instead of 72 for the block part. MoE: the
  // MLP's 16h² forward FLOPs per token become topk·4hF + 2hE.
  double step_flops(double sequences, bool recompute) const;

  // ConfigError naming the field when a value is out of range.
  void validate() const;
};

// GPT-2/GPT-3 family shapes by name ("gpt-125m", ..., "gpt-7b", "gpt-13b",
// "gpt-175b"; vocabulary 50304, GPT-2's padded, sequence 2048), for `--model`.
ModelSpec gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();

}  // namespace tessera::cli::plan
