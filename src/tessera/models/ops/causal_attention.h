// Fused causal self-attention core for CPU float32: from the packed q, k, v
// projection straight to the merged heads, with one autograd node.
//
//   qkv: [B, T, 3C] (q, k, v side by side, as a Linear(C, 3C) produces them)
//   out: [B, T, C],  out[b, t, h*hd : (h+1)*hd] = softmax(q_h k_h^T / sqrt(hd)
//                                                   + causal mask)[t] @ v_h
//
// This is the same math as the usual composition (view + transpose, matmul,
// scale, masked_fill(-inf), softmax, matmul, transpose + contiguous) to a few
// float ulps, forward and backward. It reads q, k and v in place through BLAS
// leading dimensions instead of copying them into per-head tensors, calls GEMM
// per head and row block directly instead of at::bmm's per-matrix dispatch, skips
// the blocks above the diagonal, and runs the mask and softmax in one pass. It
// saves the probabilities ([B, nh, T, T]) for backward, as the composition does.
//
// No dropout on the probabilities: callers that need attention dropout in
// training use the composition. First derivatives only (the backward is not
// itself differentiable). Parallel over batch x heads with at::parallel_for.
#pragma once

#include <torch/torch.h>

namespace tessera::models::ops {

// Whether causal_attention() takes `qkv`: a CPU float32 tensor [B, T, 3C] with C
// divisible by n_head. Other inputs belong to the composition.
bool causal_attention_supports(const torch::Tensor& qkv, int64_t n_head);

// Requires causal_attention_supports(qkv, n_head) (tessera::Error otherwise).
torch::Tensor causal_attention(const torch::Tensor& qkv, int64_t n_head);

}  // namespace tessera::models::ops
