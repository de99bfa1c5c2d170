#include "tessera/models/ops/blas_gemm.h"

#include "tessera/core/check.h"

// Fortran BLAS (column-major), as exported by libblas.so.3.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c,
                       const int* ldc);

namespace tessera::models::ops {

void gemm_row_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                    float* c, int64_t ldc) {
  constexpr int64_t kMax = 0x7fffffff;
  TS_INTERNAL_ASSERT(m <= kMax && n <= kMax && k <= kMax && lda <= kMax && ldb <= kMax &&
                         ldc <= kMax,
                     "gemm_row_major: a dimension exceeds BLAS's 32-bit int");
  if (m == 0 || n == 0) return;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a
  // row-major buffer read column-major is its transpose: swap the operands and
  // keep each one's transpose flag.
  const int M = static_cast<int>(n), N = static_cast<int>(m), K = static_cast<int>(k);
  const int LDA = static_cast<int>(ldb), LDB = static_cast<int>(lda), LDC = static_cast<int>(ldc);
  const char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
  sgemm_(&ta, &tb, &M, &N, &K, &alpha, b, &LDA, a, &LDB, &beta, c, &LDC);
}

}  // namespace tessera::models::ops
