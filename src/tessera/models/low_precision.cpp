#include "tessera/models/low_precision.h"

#include "tessera/core/check.h"
#include "tessera/core/env.h"
#include "tessera/models/activation_checkpoint.h"

namespace tessera::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// GEMMs of bfloat16 operands: LibTorch runs them natively (oneDNN, float32
// accumulation) and several times faster than float32 on CPUs with AVX512-BF16;
// elsewhere they are ~10x slower than float32, so the operands are upcast.
torch::Tensor gemm(const torch::Tensor& a, const torch::Tensor& b, bool native) {
  if (native) return at::mm(a, b);
  return at::mm(a.to(at::kFloat), b.to(at::kFloat));
}

struct LinearLowp : public torch::autograd::Function<LinearLowp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    // No bias comes as an empty tensor: autograd functions take no undefined inputs.
    const bool has_bias = bias.numel() > 0;
    const bool native = x.scalar_type() == at::kBFloat16 && native_bf16_gemm();
    ctx->save_for_backward({x, weight});
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["native"] = native;
    const torch::Tensor x2 = x.reshape({-1, x.size(-1)});
    const torch::Tensor w = native ? weight.to(at::kBFloat16) : weight;
    torch::Tensor y = gemm(x2, w.t(), native);
    if (has_bias) y = y.to(at::kFloat).add_(bias);
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = weight.size(0);
    return y.view(shape).to(x.scalar_type());
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const bool native = ctx->saved_data["native"].toBool();
    const torch::Tensor g16 = grads[0].reshape({-1, grads[0].size(-1)}).to(x.scalar_type());
    torch::Tensor gx, gw, gb;
    if (ctx->needs_input_grad(0)) {
      const torch::Tensor w = native ? weight.to(at::kBFloat16) : weight;
      gx = gemm(g16, w, native).view(x.sizes()).to(x.scalar_type());
    }
    if (ctx->needs_input_grad(1)) {
      gw = gemm(g16.t(), x.reshape({-1, x.size(-1)}), native).to(at::kFloat);
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) {
      gb = g16.to(at::kFloat).sum(0);
    }
    return {gx, gw, gb};
  }
};

}  // namespace

bool native_bf16_gemm() {
  static const bool native = [] {
    const std::string mode = env::get_string("TESSERA_BF16_GEMM");
    TS_CHECK_T(ConfigError, mode == "auto" || mode == "native" || mode == "fp32",
               "TESSERA_BF16_GEMM='", mode, "': use auto, native or fp32");
    if (mode != "auto") return mode == "native";
    return __builtin_cpu_supports("avx512bf16") != 0;
  }();
  return native;
}

bool is_low_precision(at::ScalarType dtype) {
  return dtype == at::kBFloat16 || dtype == at::kHalf;
}

torch::Tensor linear_lowp(const torch::Tensor& x, const torch::Tensor& weight,
                          const torch::Tensor& bias) {
  // Same dtype throughout (float32, or a model cast to 16 bits whole): plain.
  if (!is_low_precision(x.scalar_type()) || weight.scalar_type() == x.scalar_type()) {
    return torch::nn::functional::linear(x, weight, bias);
  }
  return LinearLowp::apply(x, weight, bias.defined() ? bias : weight.new_empty({0}));
}

torch::Tensor fp32_island(const IslandFn& fn, const std::vector<torch::Tensor>& inputs,
                          const std::vector<torch::Tensor>& params, bool round_output) {
  const at::ScalarType dtype = inputs.at(0).scalar_type();
  bool float_params = true;
  for (const auto& p : params) float_params = float_params && p.scalar_type() == at::kFloat;
  if (!is_low_precision(dtype) || !float_params) return fn(inputs);
  // By value: backward calls it again after this frame is gone.
  const at::ScalarType out_dtype = round_output ? dtype : at::kFloat;
  auto wide = [fn, out_dtype](const std::vector<torch::Tensor>& in) {
    std::vector<torch::Tensor> up;
    up.reserve(in.size());
    for (const auto& t : in) up.push_back(t.is_floating_point() ? t.to(at::kFloat) : t);
    return std::vector<torch::Tensor>{fn(up).to(out_dtype)};
  };
  if (!torch::GradMode::is_enabled()) return wide(inputs)[0];
  return checkpoint_activations(wide, inputs, params)[0];
}

}  // namespace tessera::models
