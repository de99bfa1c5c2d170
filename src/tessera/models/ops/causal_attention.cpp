#include "tessera/models/ops/causal_attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <cmath>
#include <vector>

#include "tessera/core/check.h"
#include "tessera/models/ops/blas_gemm.h"
#include "tessera/models/ops/causal_softmax.h"

namespace tessera::models::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Rows per GEMM block. Row block [r0, r1) only needs key columns [0, r1), so
// smaller blocks skip more of the upper triangle but make smaller GEMMs.
constexpr int64_t kRowBlock = 32;

// Where one (batch, head) pair's matrices live inside the packed tensors.
struct HeadView {
  int64_t T, C, hd;
  int64_t ld_qkv() const { return 3 * C; }
  int64_t qkv_offset(int64_t b, int64_t h) const { return b * T * 3 * C + h * hd; }
  int64_t out_offset(int64_t b, int64_t h) const { return b * T * C + h * hd; }
};

void attention_forward_head(const HeadView& v, const float* q, float* probs, float* out,
                            float scale) {
  const float* k = q + v.C;
  const float* val = q + 2 * v.C;
  const int64_t ld = v.ld_qkv(), T = v.T;
  for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
    const int64_t r1 = std::min(T, r0 + kRowBlock), rows = r1 - r0;
    float* s = probs + r0 * T;
    // Scores S[r0:r1, 0:r1] = scale * Q[r0:r1] K[0:r1]^T.
    gemm_row_major(false, true, rows, r1, v.hd, scale, q + r0 * ld, ld, k, ld, 0.0f, s, T);
    for (int64_t t = r0; t < r1; ++t) causal_softmax_row(probs + t * T, t, T);
    // out[r0:r1] = P[r0:r1, 0:r1] V[0:r1]
    gemm_row_major(false, false, rows, v.hd, r1, 1.0f, s, T, val, ld, 0.0f, out + r0 * v.C, v.C);
  }
}

// dq, dk, dv point into the packed gradient [B, T, 3C]; `scratch` holds T * T.
void attention_backward_head(const HeadView& v, const float* q, const float* probs,
                             const float* dout, float* dq, float scale, float* scratch) {
  const float* k = q + v.C;
  const float* val = q + 2 * v.C;
  float* dk = dq + v.C;
  float* dv = dq + 2 * v.C;
  const int64_t ld = v.ld_qkv(), T = v.T;
  // Last block first: it covers every key row (r1 == T), so it writes dK and dV
  // whole (beta 0) and the earlier blocks add to their leading rows.
  const int64_t last_r0 = ((T - 1) / kRowBlock) * kRowBlock;
  for (int64_t r0 = last_r0; r0 >= 0; r0 -= kRowBlock) {
    const int64_t r1 = std::min(T, r0 + kRowBlock), rows = r1 - r0;
    const float beta = r0 == last_r0 ? 0.0f : 1.0f;
    const float* p = probs + r0 * T;
    float* ds = scratch + r0 * T;
    // dP[r0:r1, 0:r1] = dout[r0:r1] V[0:r1]^T, then dS in place.
    gemm_row_major(false, true, rows, r1, v.hd, 1.0f, dout + r0 * v.C, v.C, val, ld, 0.0f, ds, T);
    for (int64_t t = r0; t < r1; ++t) causal_softmax_backward_row(scratch + t * T, probs + t * T, t, r1);
    // dQ[r0:r1] = scale * dS K[0:r1]
    gemm_row_major(false, false, rows, v.hd, r1, scale, ds, T, k, ld, 0.0f, dq + r0 * ld, ld);
    // dK[0:r1] (+)= scale * dS^T Q[r0:r1];  dV[0:r1] (+)= P^T dout[r0:r1]
    gemm_row_major(true, false, r1, v.hd, rows, scale, ds, T, q + r0 * ld, ld, beta, dk, ld);
    gemm_row_major(true, false, r1, v.hd, rows, 1.0f, p, T, dout + r0 * v.C, v.C, beta, dv, ld);
  }
}

class CausalAttentionFunction : public torch::autograd::Function<CausalAttentionFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv_in, int64_t n_head) {
    auto qkv = qkv_in.contiguous();
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
    const HeadView view{T, C, C / n_head};
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(view.hd)));
    auto probs = at::empty({B, n_head, T, T}, qkv.options());
    auto out = at::empty({B, T, C}, qkv.options());
    const float* q = qkv.data_ptr<float>();
    float* p = probs.data_ptr<float>();
    float* o = out.data_ptr<float>();
    at::parallel_for(0, B * n_head, 1, [&](int64_t begin, int64_t end) {
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / n_head, h = bh % n_head;
        attention_forward_head(view, q + view.qkv_offset(b, h), p + bh * T * T,
                               o + view.out_offset(b, h), scale);
      }
    });
    ctx->save_for_backward({qkv, probs});
    ctx->saved_data["n_head"] = n_head;
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& qkv = saved[0];
    const auto& probs = saved[1];
    const int64_t n_head = ctx->saved_data["n_head"].toInt();
    auto dout = grads[0].contiguous();
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
    const HeadView view{T, C, C / n_head};
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(view.hd)));
    auto dqkv = at::empty_like(qkv);
    const float* q = qkv.data_ptr<float>();
    const float* p = probs.data_ptr<float>();
    const float* g = dout.data_ptr<float>();
    float* dq = dqkv.data_ptr<float>();
    at::parallel_for(0, B * n_head, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(static_cast<size_t>(T * T));
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / n_head, h = bh % n_head;
        attention_backward_head(view, q + view.qkv_offset(b, h), p + bh * T * T,
                                g + view.out_offset(b, h), dq + view.qkv_offset(b, h), scale,
                                scratch.data());
      }
    });
    return {dqkv, torch::Tensor()};
  }
};

}  // namespace

bool causal_attention_supports(const torch::Tensor& qkv, int64_t n_head) {
  return qkv.defined() && qkv.device().is_cpu() && qkv.layout() == torch::kStrided &&
         qkv.scalar_type() == torch::kFloat && qkv.dim() == 3 && n_head > 0 &&
         qkv.size(2) % (3 * n_head) == 0 && qkv.size(1) > 0;
}

torch::Tensor causal_attention(const torch::Tensor& qkv, int64_t n_head) {
  TS_CHECK(causal_attention_supports(qkv, n_head),
             "causal_attention takes a CPU float32 [B, T, 3C] tensor with 3C divisible by 3 * "
             "n_head; got ",
             qkv.defined() ? qkv.toString() : std::string("an undefined tensor"), " ",
             qkv.defined() ? qkv.sizes() : c10::IntArrayRef{}, " and n_head ", n_head,
             " (use the matmul/softmax composition for other inputs)");
  // Named for observers of at::RecordFunction (the flops profiler counts its
  // FLOPs from qkv's shape); free when none is installed.
  RECORD_FUNCTION("tessera::causal_attention", std::vector<c10::IValue>({qkv}));
  return CausalAttentionFunction::apply(qkv, n_head);
}

}  // namespace tessera::models::ops
