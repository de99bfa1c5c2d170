// FLOPs of one ATen operator call counted from its input shapes: the
// arithmetic the flops profiler (flops_profiler.h) adds up per module.
//
// Counted: the matrix products, which are where a transformer's FLOPs are,
// at 2 FLOPs per multiply-add:
//   aten::linear(x [..., k], w [n, k])       2 · numel(x) · n
//   aten::mm / addmm (a [m, k], b [k, n])    2 · m · k · n
//   aten::bmm / baddbmm ([b, m, k] [b, k, n]) 2 · b · m · k · n
//   aten::matmul (any ranks, broadcast)      2 · batch · m · k · n
//   aten::mv / addmv, aten::dot              2 · m · k,  2 · k
//   tessera::causal_attention (qkv [B, T, 3C])  4 · B · T² · C
//     (q·kᵀ and probabilities·v over the full T×T square: the convention of
//      models/gpt_flops.h, though the fused kernel skips the masked half)
// Bias adds, activations, normalizations and softmax are not counted (they are
// a few per element, against k per element for a product).
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::runtime::profiling {

using Shape = std::vector<int64_t>;

// FLOPs of `op` (its qualified name, "aten::linear") given the shapes of its
// tensor inputs in order (a non-tensor input is an empty shape, a scalar
// tensor too). nullopt: no formula for this operator (or shapes that do not
// fit it); the profiler then counts nothing for it.
std::optional<double> op_flops(const std::string& op, const std::vector<Shape>& inputs);

// Whether op_flops has a formula for `op`: cheap, checked before the inputs
// are looked at.
bool has_flops_formula(const char* op);

}  // namespace tessera::runtime::profiling
