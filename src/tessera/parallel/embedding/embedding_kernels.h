// The arithmetic of pooled embedding lookups and of row-wise sparse Adagrad, on
// CPU float32 tables; the unsharded and the sharded collections both call these
// and nothing else, so the two compute the same numbers.
//
// Why sums are float64: pooling and gradient accumulation add float32 values in
// float64 and round to float32 once. A float64 sum of n float32 values is exact
// while their magnitudes lie within about 2^(28 - log2 n) of each other (every
// partial sum then fits 53 bits), and an exact sum does not depend on the order
// of its terms or on which rank added which part. That is what lets row-wise
// partial sums (reduce-scattered), data-parallel gradients (all-reduced) and a
// single-process table agree bit for bit. Outside that range the results still
// agree to the last float32 bit in almost every case.
//
// Pure functions on caller-owned tensors; no communication; thread-compatible.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "tessera/parallel/embedding/embedding_types.h"

namespace tessera::parallel {

// weight [R, W] float32, lengths [N] int64, rows [sum(lengths)] int64 in [0, R):
// float64 [N, W] sums of each bag's rows (zeros for empty bags).
at::Tensor pool_sums(const at::Tensor& weight, const at::Tensor& lengths, const at::Tensor& rows);

// float64 sums [N, W] -> float32 pooled outputs: mean pooling divides by the
// bag's length (in float64) before the one rounding.
at::Tensor finish_pooling(const at::Tensor& sums, const at::Tensor& lengths, PoolingType pooling);

// The gradient that reaches each row of a bag from its pooled output grad [N, D]
// float32: itself for sum pooling, divided by the bag length (in float32) for
// mean pooling. Done by the rank that owns the sample, before any exchange.
at::Tensor scale_output_grad(const at::Tensor& grad, const at::Tensor& lengths,
                             PoolingType pooling);

// The gradient of each touched row: rows [U] int64 sorted unique, grads [U, D]
// float32. Never a dense [R, D] gradient.
struct RowGradients {
  at::Tensor rows;
  at::Tensor grads;
};

// grad [N, D] float32 (scaled by scale_output_grad), lengths [N], rows [sum]:
// per unique row, the float64 sum of its bags' gradients, rounded once.
RowGradients row_gradients(const at::Tensor& grad, const at::Tensor& lengths,
                           const at::Tensor& rows);

// FBGEMM's rowwise_adagrad on the touched rows only. For each row r of `g`
// (local row index): accum[r] += mean over all D columns of g^2, then
// weight[r, c] -= lr * g[r, col_begin + c] / (sqrt(accum[r]) + eps) for the
// weight's W columns. A column shard passes the full-width gradient and its first
// column, so every shard's accumulator equals the unsharded table's.
void rowwise_adagrad_update(at::Tensor& weight, at::Tensor& accum, const RowGradients& g,
                            int64_t col_begin, const RowwiseAdagradOptions& options);

// Rows [row_begin, row_end) and columns [col_begin, col_end) of the table's
// initial weights, uniform in +-1/sqrt(rows) (TorchRec's default), drawn per
// block of rows from a generator seeded by (seed, table name, block): any shard
// of any plan starts from the same numbers without materializing the table.
at::Tensor init_table_block(const EmbeddingTableConfig& table, uint64_t seed, int64_t row_begin,
                            int64_t row_end, int64_t col_begin, int64_t col_end);

}  // namespace tessera::parallel
