// The small GPT the tests train: a 64-token vocabulary, 16 positions, width 32,
// every other field GPTConfig's default. Tests set what they need on top (bias,
// seed, dropout, compute_dtype), so their models differ only where it matters.
#pragma once

#include <cstdint>

#include "tessera/models/gpt.h"

namespace tessera::testing {

inline models::GPTConfig small_gpt(int64_t n_layer = 2, int64_t n_head = 2) {
  models::GPTConfig c;
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = 32;
  return c;
}

}  // namespace tessera::testing
