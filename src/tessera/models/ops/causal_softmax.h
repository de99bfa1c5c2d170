// Row kernels of causal attention on float32 score rows.
//
// Row t of a causal score matrix attends to columns 0..t. The forward kernel
// turns those t + 1 scores into probabilities (max-subtracted softmax) and zeroes
// columns t + 1 .. width - 1, so later GEMMs can read whole rows. The backward
// kernel maps dP to dS = P * (dP - sum_j P_j dP_j) over the same columns and
// zeroes the rest. An AVX2+FMA forward is chosen at run time when the CPU has it;
// it agrees with the scalar one (and with at::softmax) to a few float ulps.
#pragma once

#include <cstdint>

namespace tessera::models::ops {

// In place on `row` (width entries), for a row at position t (0 <= t < width).
void causal_softmax_row(float* row, int64_t t, int64_t width);
// dp (width entries) becomes dS; p is the forward's output row.
void causal_softmax_backward_row(float* dp, const float* p, int64_t t, int64_t width);

namespace detail {
void causal_softmax_row_scalar(float* row, int64_t t, int64_t width);
// In causal_softmax_avx2.cpp (compiled with -mavx2 -mfma); call only
// when cpu_has_avx2_fma().
void causal_softmax_row_avx2(float* row, int64_t t, int64_t width);
bool cpu_has_avx2_fma();
}  // namespace detail

}  // namespace tessera::models::ops
