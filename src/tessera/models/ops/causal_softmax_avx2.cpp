// AVX2 + FMA causal softmax row. This file alone is compiled with -mavx2 -mfma
// and without the precompiled headers; nothing here runs unless
// cpu_has_avx2_fma().
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "tessera/models/ops/causal_softmax.h"

namespace tessera::models::ops::detail {
namespace {

// exp(x) for x <= 0 (softmax arguments after subtracting the max): Cody-Waite
// reduction by ln 2 and a degree-6 polynomial, ~1 ulp. Below -87 it returns
// ~1.6e-38 instead of a denormal, which the normalisation rounds to 0.
inline __m256 exp_nonpositive(__m256 x) {
  // Operand order matters: max_ps returns its second operand when either is NaN,
  // so a NaN score stays NaN instead of becoming exp(-87).
  x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln 2, with ln 2 split in two so n * hi is exact.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline float horizontal_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

}  // namespace

bool cpu_has_avx2_fma() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

void causal_softmax_row_avx2(float* row, int64_t t, int64_t width) {
  const int64_t n = t + 1;
  const int64_t vec_end = n - n % 8;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < vec_end; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(row + j));
  float max = horizontal_max(vmax);
  for (int64_t j = vec_end; j < n; ++j) max = std::max(max, row[j]);

  const __m256 vm = _mm256_set1_ps(max);
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t j = 0; j < vec_end; j += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm));
    _mm256_storeu_ps(row + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = horizontal_sum(vsum);
  for (int64_t j = vec_end; j < n; ++j) {
    row[j] = std::exp(row[j] - max);
    sum += row[j];
  }

  const float inv = 1.0f / sum;
  const __m256 vinv = _mm256_set1_ps(inv);
  for (int64_t j = 0; j < vec_end; j += 8)
    _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), vinv));
  for (int64_t j = vec_end; j < n; ++j) row[j] *= inv;
  std::fill(row + n, row + width, 0.0f);
}

}  // namespace tessera::models::ops::detail
