// The small GPT every ZeRO test trains (threads, processes and checkpoints), so
// their comparisons are over one model.
#pragma once

#include "testing/small_gpt.h"

namespace tessera::testing {

inline models::GPTConfig zero_test_gpt() {
  models::GPTConfig c = small_gpt(/*n_layer=*/3);
  // No biases, as in nanoGPT's default. The attention key bias has an exactly zero
  // gradient (softmax ignores a constant added to a row's scores), so Adam turns
  // its float rounding noise into lr-sized steps that differ with the summation
  // order of any two correct reductions.
  c.bias = false;
  c.seed = 7;
  return c;
}

}  // namespace tessera::testing
