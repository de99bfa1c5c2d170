// Tessera's CPU Adam and AdamW kernel: one vectorized, multi-threaded pass over
// a parameter, its gradient and its moments, for CPU training and for the ZeRO
// shards and offloaded optimizer state that live on the host.
//
// torch::optim::AdamW runs about nine ATen operations per parameter, each a pass
// over memory, and allocates two temporaries the size of the parameter. This
// kernel reads param, grad, exp_avg and exp_avg_sq once and writes param,
// exp_avg and exp_avg_sq once (plus max_exp_avg_sq with amsgrad, plus an
// optional 16-bit copy of the updated parameter for mixed-precision masters),
// in blocks that stay in cache between the few sub-steps. A list of tensors is
// stepped in one fork-join over LibTorch's threads (core/parallel_chunks.h: in
// Tessera, built without OpenMP, at::parallel_for would run serially), split
// into ranges that may cross tensor boundaries, so a model's many small biases
// and norms cost no fork/join each.
//
// Arithmetic: the operations of LibTorch 2.x's torch::optim::Adam / AdamW (the
// C++ frontend), in its order and with its roundings, element by element:
//   AdamW, wd != 0:  p = p * f(1 - lr wd)                  (rounded before the update)
//   Adam,  wd != 0:  g = fma(p, f(wd), g)                  (ATen's add with alpha)
//   m = fma(g, f(1 - b1), m * f(b1))                       (mul_, then add_ with alpha)
//   v = fma(f(1 - b2) * g, g, v * f(b2))                   (mul_, then addcmul_)
//   amsgrad:  vmax = max(vmax, v) (NaN propagates), used for v below
//   d = sqrt(v) / f(sqrt(1 - b2^t)) + f(eps)
//   p = p + (f(-lr / (1 - b1^t)) * m) / d                  (addcdiv_)
// f() rounds a double to float as ATen rounds a Scalar operand; t is the step
// count after this update. Every path (scalar, AVX2+FMA, AVX-512) computes these
// same IEEE operations, so the result does not depend on the ISA, the thread
// count or where a range starts.
//
// The square root: LibTorch's CPU sqrt of float32 is MKL's vsSqrt in the pip
// wheel (not correctly rounded: about 1 result in 6 differs by one ulp from
// IEEE sqrt, and which ones depends on the CPU MKL dispatches for) and the
// vector instruction otherwise. CpuAdamSqrt::kIeee (the default) uses the
// correctly rounded vector sqrt: the same results on every x86 CPU, within one
// ulp of LibTorch's denominators (after 5 steps the parameters are within
// 4.2e-7 x (|p| + lr) of torch::optim::AdamW's, tests/runtime/test_cpu_adam.cpp).
// kLibTorch calls the same MKL routine as LibTorch when the process has it
// (looked up once at run time): every result equals torch::optim::Adam/AdamW's
// bit for bit, at MKL's speed (on AMD CPUs about 1 G elements/s per core, which
// makes the whole update 1.5x slower than with kIeee).
//
// Thread safety: the functions are reentrant; concurrent calls must not share
// output buffers. maximize is refused (LibTorch's C++ Adam does not have it).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::runtime {

// Hyper-parameters of one update of one tensor.
struct CpuAdamHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool adamw = true;      // decoupled weight decay (AdamW); false: Adam's L2 term
  bool amsgrad = false;   // needs max_exp_avg_sq
  bool maximize = false;  // refused
  int64_t step = 1;       // the step count after this update (1 for the first)
};

// A 16-bit copy of the updated parameter, rounded to nearest even.
enum class ParamCopy { kNone, kBFloat16, kFloat16 };

// The arrays of one tensor's update: `numel` elements each, no two overlapping.
struct CpuAdamBuffers {
  float* param = nullptr;
  const float* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  float* max_exp_avg_sq = nullptr;  // amsgrad only
  void* param_copy = nullptr;       // with copy != kNone: numel uint16 (bf16 or fp16 bits)
  ParamCopy copy = ParamCopy::kNone;
  int64_t numel = 0;
};

struct CpuAdamTask {
  CpuAdamBuffers buffers;
  CpuAdamHyper hyper;
};

// The instruction set of the vector loops. kAuto: the widest this CPU and OS
// support (AVX-512F, else AVX2 with FMA, else scalar); naming one the CPU lacks
// is an error. The results are the same for every choice.
enum class CpuAdamIsa { kAuto, kScalar, kAvx2, kAvx512 };

// The denominator's square root (above): correctly rounded, or LibTorch's own.
enum class CpuAdamSqrt { kIeee, kLibTorch };

struct CpuAdamOptions {
  CpuAdamIsa isa = CpuAdamIsa::kAuto;
  CpuAdamSqrt sqrt = CpuAdamSqrt::kIeee;
};

// Updates every task in one parallel region. tessera::Error for a null buffer,
// a missing max_exp_avg_sq with amsgrad, maximize, or an invalid hyper-parameter
// (lr, eps, weight_decay < 0; betas outside [0, 1); step < 1). Blocking.
void cpu_adam_update(const std::vector<CpuAdamTask>& tasks, const CpuAdamOptions& options = {});
void cpu_adam_update(const CpuAdamBuffers& buffers, const CpuAdamHyper& hyper,
                     const CpuAdamOptions& options = {});

// One tensor's update: param, grad, exp_avg, exp_avg_sq (and max_exp_avg_sq when
// hyper.amsgrad) contiguous float32 CPU tensors of param's numel; `param_copy`,
// when defined, a contiguous bfloat16 or float16 CPU tensor of that numel that
// receives the updated parameter rounded. Updates in place (no autograd: call it
// under at::NoGradGuard or on tensors that do not require grad; it bumps the
// version counters as in-place ATen ops do). tessera::Error naming the tensor
// and what to do for anything else.
void cpu_adam_step(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                   const at::Tensor& exp_avg_sq, const CpuAdamHyper& hyper,
                   const at::Tensor& max_exp_avg_sq = {}, const at::Tensor& param_copy = {},
                   const CpuAdamOptions& options = {});

// The ISA kAuto resolves to on this machine, and whether `isa` can run here.
CpuAdamIsa cpu_adam_best_isa();
bool cpu_adam_isa_supported(CpuAdamIsa isa);
// Whether kLibTorch finds LibTorch's MKL square root (else it is the IEEE one,
// which is then also LibTorch's).
bool cpu_adam_uses_mkl_sqrt();
// "avx2", "avx512", "scalar"; and a one-line summary for logs and benchmarks.
std::string to_string(CpuAdamIsa isa);
std::string cpu_adam_describe(const CpuAdamOptions& options = {});

}  // namespace tessera::runtime
