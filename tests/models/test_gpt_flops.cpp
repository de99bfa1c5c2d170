// The GPT's FLOPs formula (models/gpt_flops.h) against a hand count for a tiny
// GPT, and its parameter count against the model itself.
#include <gtest/gtest.h>

#include "tessera/models/gpt.h"
#include "tessera/models/gpt_flops.h"

namespace tessera::models {
namespace {

// V = 16, T = 8, L = 2, C = 8 (2 heads of 4).
GPTConfig tiny(bool bias = true) {
  GPTConfig c;
  c.vocab_size = 16;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.bias = bias;
  return c;
}

TEST(GPTFlops, ParameterCountsMatchAHandCount) {
  const GPTFlopCount n = gpt_flop_count(tiny());
  // One block: c_attn 8x24 + 24, attn.c_proj 8x8 + 8, c_fc 8x32 + 32,
  // mlp.c_proj 32x8 + 8, ln_1 and ln_2 8 + 8 each.
  const int64_t block = (192 + 24) + (64 + 8) + (256 + 32) + (256 + 8) + 16 + 16;
  EXPECT_EQ(block, 872);
  EXPECT_EQ(n.block_params, 2 * block);
  // Psi: the blocks, ln_f (8 + 8) and wte as the head (16 x 8); not wpe.
  EXPECT_EQ(n.flop_params, 2 * block + 16 + 128);
  EXPECT_EQ(n.matmul_weights, 2 * (192 + 64 + 256 + 256) + 128);
  // Without biases the four Linears lose theirs; the LayerNorms keep theirs.
  EXPECT_EQ(gpt_flop_count(tiny(false)).block_params, 2 * (768 + 32));
}

TEST(GPTFlops, PsiIsTheModelsParametersWithoutThePositionTable) {
  for (bool bias : {true, false}) {
    GPT model(tiny(bias));
    EXPECT_EQ(gpt_flop_count(tiny(bias)).flop_params,
              model->num_parameters(/*exclude_position_embeddings=*/true));
    // The weight matrices that multiply activations: every 2-D parameter but wpe.
    int64_t matmul = 0;
    for (const auto& p : model->named_parameters()) {
      if (p.value().dim() == 2 && p.key() != "wpe.weight") matmul += p.value().numel();
    }
    EXPECT_EQ(gpt_flop_count(tiny(bias)).matmul_weights, matmul);
  }
}

TEST(GPTFlops, TrainingFlopsPerTokenArePaLMs) {
  const GPTFlopCount n = gpt_flop_count(tiny());
  // 6 * 1888 + 12 * L(2) * C(8) * T(8).
  EXPECT_DOUBLE_EQ(n.train_flops_per_token(8), 6.0 * 1888 + 12.0 * 2 * 8 * 8);
  EXPECT_DOUBLE_EQ(n.train_flops_per_token(8), 12864.0);
  // Shorter sequences only shrink the attention term.
  EXPECT_DOUBLE_EQ(n.train_flops_per_token(4), 6.0 * 1888 + 12.0 * 2 * 8 * 4);
}

TEST(GPTFlops, ForwardMatmulsAndRecomputeByHand) {
  const GPTFlopCount n = gpt_flop_count(tiny());
  // Per token of one forward, per layer: c_attn 2*8*24, c_proj 2*8*8, c_fc 2*8*32,
  // mlp.c_proj 2*32*8, q.k^T and p.v 2*T*C each; plus the head 2*8*16.
  const double per_token = 2 * (384 + 128 + 512 + 512 + 2 * (2 * 8 * 8)) + 2 * 8 * 16;
  EXPECT_DOUBLE_EQ(per_token, 3840.0);
  EXPECT_DOUBLE_EQ(n.forward_matmul_flops(3, 8), 3 * 8 * per_token);
  // Activation checkpointing runs every block's forward again.
  EXPECT_DOUBLE_EQ(n.recompute_flops_per_token(8), 2.0 * 1744 + 4.0 * 2 * 8 * 8);
}

}  // namespace
}  // namespace tessera::models
