#include "tessera/models/ops/causal_softmax.h"

#include <algorithm>
#include <cmath>

namespace tessera::models::ops {
namespace detail {

void causal_softmax_row_scalar(float* row, int64_t t, int64_t width) {
  const int64_t n = t + 1;
  const float max = *std::max_element(row, row + n);
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    row[j] = std::exp(row[j] - max);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
  std::fill(row + n, row + width, 0.0f);
}

}  // namespace detail

void causal_softmax_row(float* row, int64_t t, int64_t width) {
  static const bool avx2 = detail::cpu_has_avx2_fma();
  if (avx2)
    detail::causal_softmax_row_avx2(row, t, width);
  else
    detail::causal_softmax_row_scalar(row, t, width);
}

void causal_softmax_backward_row(float* dp, const float* p, int64_t t, int64_t width) {
  const int64_t n = t + 1;
  float dot = 0;
  for (int64_t j = 0; j < n; ++j) dot += p[j] * dp[j];
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - dot);
  std::fill(dp + n, dp + width, 0.0f);
}

}  // namespace tessera::models::ops
