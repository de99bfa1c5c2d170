// Row-major float32 GEMM straight on the BLAS library LibTorch itself uses
// (libblas.so.3: OpenBLAS on Debian when libopenblas0-pthread is installed).
//
// Small matrices are where a call through at::bmm/at::matmul costs as much as
// the arithmetic (views, shape checks and dispatch per batch element); the fused
// kernels in this folder call this instead, with strides taken from tensors they
// have already checked.
#pragma once

#include <cstdint>

namespace tessera::models::ops {

// C[m x n] = alpha * op(A) * op(B) + beta * C, all row-major with leading
// dimensions (row strides) lda, ldb, ldc. op(A) is m x k: A itself (k columns)
// or, with trans_a, the transpose of a stored k x m matrix; likewise op(B) is
// k x n. beta == 0 overwrites C without reading it.
void gemm_row_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                    float* c, int64_t ldc);

}  // namespace tessera::models::ops
