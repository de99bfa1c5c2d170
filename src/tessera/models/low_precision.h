// Building blocks for models whose activations are 16-bit (bfloat16 or float16)
// while their parameters stay float32, on a CPU where 16-bit arithmetic is slow
// (bf16 GEMM runs at a tenth of fp32's speed) or missing (no fp16 GEMM, layer
// norm, GELU or dropout kernel). Activations are stored in 16 bits between ops,
// which halves what autograd keeps for backward; every op computes in float32.
//
//   linear_lowp(x, w, b)    y = x w^T + b, returned in x's dtype; saves x (16-bit)
//                           and the parameter and computes the input and weight
//                           gradients from them. The GEMMs run in float32 on the
//                           upcast operands, except bfloat16 ones on a CPU with
//                           native bf16 GEMMs (native_bf16_gemm()), which run in
//                           bf16 with float32 accumulation. The parameter's
//                           gradient is float32, like the parameter.
//   fp32_island(fn, in, p)  runs fn on the inputs upcast to float32 and rounds
//                           its outputs to the inputs' dtype. Only the 16-bit
//                           inputs are kept; backward recomputes fn in float32
//                           (activation_checkpoint.h), so use it for cheap ops
//                           (layer norm, GELU, softmax, dropout, cross entropy),
//                           not for GEMMs. `p` are the parameters fn uses.
//
// Both are plain LibTorch ops when the input is float32 or when the parameters
// have the input's dtype (a model cast to 16 bits whole), so a model written
// with them runs unchanged in fp32.
// Thread-compatible: no shared state.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace tessera::models {

// Whether bfloat16 GEMMs run natively: TESSERA_BF16_GEMM=native or fp32, or
// (auto, the default) whether the CPU has AVX512-BF16, where LibTorch's bf16
// GEMM is several times faster than float32's (about 10x slower without it).
// Decided once per process.
bool native_bf16_gemm();

// True for the activation dtypes these ops round to (kBFloat16, kHalf).
bool is_low_precision(at::ScalarType dtype);

// x: [..., in] of any floating dtype; weight [out, in] and bias [out] (bias may be
// undefined) float32. Returns [..., out] in x's dtype.
torch::Tensor linear_lowp(const torch::Tensor& x, const torch::Tensor& weight,
                          const torch::Tensor& bias = {});

using IslandFn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

// fn's float32 result rounded to the dtype of inputs[0] (kept in float32 with
// round_output false: a loss, whose gradient is the fp16 loss scale, which may
// exceed float16's range). Inputs that are not floating point (token ids, masks)
// pass through unconverted.
torch::Tensor fp32_island(const IslandFn& fn, const std::vector<torch::Tensor>& inputs,
                          const std::vector<torch::Tensor>& params, bool round_output = true);

}  // namespace tessera::models
