// Attention of a block of queries against a block of keys, with the softmax
// statistics kept, so that blocks computed apart (on other ranks, or at other
// steps of a ring) combine into exactly the attention over their union.
//
//   out_b, lse_b = attention of q against block b      (block_attention_forward)
//   lse          = log(sum_b exp(lse_b))               (merge_attention_blocks)
//   out          = sum_b exp(lse_b - lse) * out_b
//
// and the backward pass of the union, block by block, from the final (out, lse)
// alone (block_attention_backward): the probabilities are recomputed, never
// stored, so a rank keeps O(T) activations per head instead of O(T^2).
//
// Positions make causality independent of where a block came from: under
// causal attention, query at global position i sees key at position j iff
// j <= i. A block whose keys all lie after every query is skipped.
//
// Shapes: q [B, H, Tq, D], k and v [B, H, Tk, D], positions int64 [Tq] / [Tk],
// out [B, H, Tq, D] in q's dtype, lse [B, H, Tq] float32 (-inf for a query that
// saw no key yet). Arithmetic in float32 whatever the input dtype.
#pragma once

#include <torch/torch.h>

namespace tessera::parallel {

struct BlockAttentionResult {
  torch::Tensor out;  // float32
  torch::Tensor lse;  // float32
};

// How finely a block is cut before computing: q into q_pieces and k, v into
// k_pieces equal pieces along the sequence, and every (q piece, k piece) pair
// that causality masks whole is skipped. Pieces that follow the context-parallel
// chunks let a rank skip exactly the work head-tail pairing makes unnecessary.
struct BlockPieces {
  int64_t q = 1;
  int64_t k = 1;
};

// The attention of q against one block of keys; {zeros, -inf} for queries that
// causality hides the whole block from. Positions are CPU int64 tensors.
BlockAttentionResult block_attention_forward(const torch::Tensor& q, const torch::Tensor& k,
                                             const torch::Tensor& v, const torch::Tensor& q_pos,
                                             const torch::Tensor& k_pos, bool causal, double scale,
                                             BlockPieces pieces = {});

// Folds `block` into `acc` (either may be empty: acc.out undefined).
void merge_attention_blocks(BlockAttentionResult& acc, const BlockAttentionResult& block);

struct BlockAttentionGrads {
  torch::Tensor dq, dk, dv;  // float32 (zeros where the block was masked whole)
};

// Gradients through one block given the final out and lse of every block
// merged and `delta` = rowsum(dout * out) [B, H, Tq] (float32).
BlockAttentionGrads block_attention_backward(const torch::Tensor& q, const torch::Tensor& k,
                                             const torch::Tensor& v, const torch::Tensor& q_pos,
                                             const torch::Tensor& k_pos, bool causal, double scale,
                                             const torch::Tensor& dout, const torch::Tensor& lse,
                                             const torch::Tensor& delta, BlockPieces pieces = {});

}  // namespace tessera::parallel
