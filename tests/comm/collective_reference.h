// Deterministic per-rank inputs and locally computed references for the
// collective suite: every rank can rebuild every other rank's input, so each
// result is checked against a reduction computed in float64 on this rank.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/comm/base/reduce_op.h"

namespace tessera::testing {

// Rank r's input for case `seed`: values in [-2, 2] in steps of 0.5 (integers in
// [-4, 4] for integer dtypes), so sums, products, min and max of up to four ranks
// are exact in every floating dtype and the only inexact op is avg.
inline at::Tensor rank_input(int rank, int64_t numel, at::ScalarType dtype, int seed) {
  at::Tensor idx = at::arange(numel, at::kLong);
  at::Tensor v = at::remainder(idx * 3 + rank * 7 + seed, 9) - 4;
  at::Tensor d = v.to(at::kDouble);
  if (at::isFloatingType(dtype)) d = d * 0.5;
  return d.to(dtype);
}

// op over every rank's input, computed in float64 and cast to dtype the way a
// backend that accumulates in float32 (or exactly) would produce it.
inline at::Tensor reference_reduce(int world, int64_t numel, at::ScalarType dtype, int seed,
                                   comm::ReduceOp op) {
  at::Tensor acc = rank_input(0, numel, dtype, seed).to(at::kDouble);
  for (int r = 1; r < world; ++r) {
    at::Tensor x = rank_input(r, numel, dtype, seed).to(at::kDouble);
    switch (op) {
      case comm::ReduceOp::kSum:
      case comm::ReduceOp::kAvg: acc = acc + x; break;
      case comm::ReduceOp::kProduct: acc = acc * x; break;
      case comm::ReduceOp::kMin: acc = at::minimum(acc, x); break;
      case comm::ReduceOp::kMax: acc = at::maximum(acc, x); break;
    }
  }
  if (op == comm::ReduceOp::kAvg) {
    acc = at::isFloatingType(dtype) ? acc / world : at::div(acc, world, "trunc");
  }
  return acc.to(dtype);
}

// Relative tolerance of one rounding step in dtype (0 for integers).
inline double dtype_rtol(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return 1e-6;
    case at::kDouble: return 1e-12;
    case at::kHalf: return 1e-3;
    case at::kBFloat16: return 8e-3;
    default: return 0;
  }
}

// Bitwise equality when `exact`, else within one rounding of dtype. Records a
// gtest failure naming `what` and the largest difference.
inline void expect_matches(const at::Tensor& actual, const at::Tensor& expected, bool exact,
                           const std::string& what) {
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type()) << what;
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  if (actual.numel() == 0) return;
  at::Tensor a = actual.to(at::kDouble), e = expected.to(at::kDouble);
  double max_diff = (a - e).abs().max().item<double>();
  if (exact) {
    EXPECT_TRUE(at::equal(actual.contiguous(), expected.contiguous()))
        << what << ": not bitwise equal, max diff " << max_diff;
  } else {
    double rtol = dtype_rtol(actual.scalar_type());
    EXPECT_TRUE(at::allclose(a, e, rtol, rtol)) << what << ": max diff " << max_diff;
  }
}

}  // namespace tessera::testing
