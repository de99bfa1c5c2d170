#include "tessera/runtime/cpu_adam.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/sqrt_ops.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tessera/core/check.h"
#include "tessera/core/parallel_chunks.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define TS_CPU_ADAM_X86 1
#include <cpuid.h>
#include <immintrin.h>
#define TS_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TS_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#endif

namespace tessera::runtime {
namespace {

// Elements per parallel work unit: ranges split at multiples of it.
constexpr int64_t kBlock = 1024;
// Elements per block with MKL's root: the block's p, g, m, v and roots (80 KB)
// stay in L2 between the moment pass, the roots and the update pass. MKL
// threads vsSqrt itself from about 16 Ki elements (its own OpenMP team per
// calling thread); 4096 keeps every call on its caller's thread.
constexpr int64_t kRootBlock = 4096;
// Below this many elements in all one thread does the work: a fork/join costs
// more than updating 32 Ki elements. It is also the smallest chunk of work.
constexpr int64_t kSerialNumel = int64_t{1} << 15;

// A task's hyper-parameters as the float operands LibTorch's ops use (a double
// Scalar is rounded to float once, when the op starts).
struct Coeffs {
  bool decay = false;  // weight_decay != 0
  bool adamw = true;
  bool amsgrad = false;
  float decay_mul = 1;  // AdamW: 1 - lr wd
  float wd = 0;         // Adam: the L2 coefficient
  float b1 = 0, c1 = 0, b2 = 0, c2 = 0;
  float root_bc2 = 1;  // sqrt(1 - beta2^t)
  float eps = 0;
  float neg_step_size = 0;  // -lr / (1 - beta1^t)
};

Coeffs coeffs_of(const CpuAdamHyper& h) {
  Coeffs c;
  c.decay = h.weight_decay != 0;
  c.adamw = h.adamw;
  c.amsgrad = h.amsgrad;
  c.decay_mul = static_cast<float>(1 - h.lr * h.weight_decay);
  c.wd = static_cast<float>(h.weight_decay);
  c.b1 = static_cast<float>(h.beta1);
  c.c1 = static_cast<float>(1 - h.beta1);
  c.b2 = static_cast<float>(h.beta2);
  c.c2 = static_cast<float>(1 - h.beta2);
  const double t = static_cast<double>(h.step);
  c.root_bc2 = static_cast<float>(std::sqrt(1 - std::pow(h.beta2, t)));
  c.eps = static_cast<float>(h.eps);
  c.neg_step_size = static_cast<float>(-(h.lr / (1 - std::pow(h.beta1, t))));
  return c;
}

// One tensor's range of elements.
struct Span {
  float* p;
  const float* g;
  float* m;
  float* v;
  float* vmax;  // amsgrad only
  uint16_t* copy16;
  ParamCopy copy;
  int64_t n;
};

Span offset(const CpuAdamBuffers& b, int64_t at, int64_t n) {
  return {b.param + at,
          b.grad + at,
          b.exp_avg + at,
          b.exp_avg_sq + at,
          b.max_exp_avg_sq ? b.max_exp_avg_sq + at : nullptr,
          b.param_copy ? static_cast<uint16_t*>(b.param_copy) + at : nullptr,
          b.copy,
          n};
}

// GCC fuses a product into a later addition (an FMA) even across statements,
// vector intrinsics included; LibTorch rounds AdamW's decayed parameter in a
// kernel of its own, so the product must stay rounded. An empty asm hides the
// value's origin from the optimizer at no cost.
// (A macro, not a function: a function taking __m512 would need AVX-512 itself.)
#if defined(TS_CPU_ADAM_X86)
#define TS_KEEP_ROUNDED(x) asm("" : "+x"(x))
#elif defined(__GNUC__) && defined(__aarch64__)
#define TS_KEEP_ROUNDED(x) asm("" : "+w"(x))
#else
#define TS_KEEP_ROUNDED(x) (void)(x)
#endif

// ---- scalar: the reference, and the tails of the AVX2 loops ----

inline float nan_max(float a, float b) {
  return (a != a || b != b) ? std::numeric_limits<float>::quiet_NaN() : std::max(a, b);
}

// Decays p (AdamW), advances m, v (and vmax); returns what the root is taken of.
inline float moments1(float& p, float g, float& m, float& v, float* vmax, const Coeffs& c) {
  if (c.decay) {
    if (c.adamw) {
      p = p * c.decay_mul;
      TS_KEEP_ROUNDED(p);
    } else {
      g = std::fma(p, c.wd, g);
    }
  }
  m = std::fma(g, c.c1, m * c.b1);
  v = std::fma(c.c2 * g, g, v * c.b2);
  if (!c.amsgrad) return v;
  *vmax = nan_max(*vmax, v);
  return *vmax;
}

inline float apply1(float p, float m, float root, const Coeffs& c) {
  const float d = root / c.root_bc2 + c.eps;
  return p + (c.neg_step_size * m) / d;
}

inline void store_copy1(uint16_t* dst, float x, ParamCopy copy) {
  if (copy == ParamCopy::kBFloat16) *dst = c10::BFloat16(x).x;
  if (copy == ParamCopy::kFloat16) *dst = c10::Half(x).x;
}

// Elements [from, n) in one pass with the IEEE root.
void fused_scalar(const Span s, const Coeffs c, int64_t from = 0) {
  for (int64_t i = from; i < s.n; ++i) {
    float p = s.p[i], m = s.m[i], v = s.v[i];
    const float root = std::sqrt(moments1(p, s.g[i], m, v, s.vmax ? s.vmax + i : nullptr, c));
    s.m[i] = m;
    s.v[i] = v;
    s.p[i] = p = apply1(p, m, root, c);
    if (s.copy16) store_copy1(s.copy16 + i, p, s.copy);
  }
}

void moments_scalar(const Span s, const Coeffs c, int64_t from = 0) {
  for (int64_t i = from; i < s.n; ++i) {
    float p = s.p[i], m = s.m[i], v = s.v[i];
    moments1(p, s.g[i], m, v, s.vmax ? s.vmax + i : nullptr, c);
    s.p[i] = p;
    s.m[i] = m;
    s.v[i] = v;
  }
}

void apply_scalar(const Span s, const Coeffs c, const float* root, int64_t from = 0) {
  for (int64_t i = from; i < s.n; ++i) {
    s.p[i] = apply1(s.p[i], s.m[i], root[i], c);
    if (s.copy16) store_copy1(s.copy16 + i, s.p[i], s.copy);
  }
}

#if defined(TS_CPU_ADAM_X86)

// ---- AVX2 + FMA: 8 lanes, the tail in scalar code ----

TS_AVX2 inline __m256 moments8(__m256& p, __m256 g, __m256& m, __m256& v, float* vmax,
                               const Coeffs& c) {
  if (c.decay) {
    if (c.adamw) {
      p = _mm256_mul_ps(p, _mm256_set1_ps(c.decay_mul));
      TS_KEEP_ROUNDED(p);
    } else {
      g = _mm256_fmadd_ps(p, _mm256_set1_ps(c.wd), g);
    }
  }
  m = _mm256_fmadd_ps(g, _mm256_set1_ps(c.c1), _mm256_mul_ps(m, _mm256_set1_ps(c.b1)));
  v = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(c.c2), g), g,
                      _mm256_mul_ps(v, _mm256_set1_ps(c.b2)));
  if (!c.amsgrad) return v;
  const __m256 old = _mm256_loadu_ps(vmax);
  // max, NaN where either is NaN (at::maximum), the same NaN as the scalar path.
  const __m256 mx = _mm256_blendv_ps(_mm256_max_ps(old, v),
                                     _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()),
                                     _mm256_cmp_ps(old, v, _CMP_UNORD_Q));
  _mm256_storeu_ps(vmax, mx);
  return mx;
}

TS_AVX2 inline __m256 apply8(__m256 p, __m256 m, __m256 root, const Coeffs& c) {
  const __m256 d =
      _mm256_add_ps(_mm256_div_ps(root, _mm256_set1_ps(c.root_bc2)), _mm256_set1_ps(c.eps));
  return _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(_mm256_set1_ps(c.neg_step_size), m), d));
}

// bfloat16: round to nearest even on the bits (c10::BFloat16's rule, NaN -> 0x7fc0).
TS_AVX2 inline void store_copy8(uint16_t* dst, __m256 x, ParamCopy copy) {
  __m128i out;
  if (copy == ParamCopy::kFloat16) {
    out = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    const __m256i b = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
    // packus interleaves the 128-bit lanes; qwords 0 and 2 hold the 8 results.
    out = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), out);
}

TS_AVX2 void fused_avx2(const Span s, const Coeffs c) {
  int64_t i = 0;
  for (; i + 8 <= s.n; i += 8) {
    __m256 p = _mm256_loadu_ps(s.p + i), m = _mm256_loadu_ps(s.m + i);
    __m256 v = _mm256_loadu_ps(s.v + i);
    const __m256 r = moments8(p, _mm256_loadu_ps(s.g + i), m, v, s.vmax ? s.vmax + i : nullptr, c);
    _mm256_storeu_ps(s.m + i, m);
    _mm256_storeu_ps(s.v + i, v);
    p = apply8(p, m, _mm256_sqrt_ps(r), c);
    _mm256_storeu_ps(s.p + i, p);
    if (s.copy16) store_copy8(s.copy16 + i, p, s.copy);
  }
  fused_scalar(s, c, i);
}

TS_AVX2 void moments_avx2(const Span s, const Coeffs c) {
  int64_t i = 0;
  for (; i + 8 <= s.n; i += 8) {
    __m256 p = _mm256_loadu_ps(s.p + i), m = _mm256_loadu_ps(s.m + i);
    __m256 v = _mm256_loadu_ps(s.v + i);
    moments8(p, _mm256_loadu_ps(s.g + i), m, v, s.vmax ? s.vmax + i : nullptr, c);
    _mm256_storeu_ps(s.p + i, p);
    _mm256_storeu_ps(s.m + i, m);
    _mm256_storeu_ps(s.v + i, v);
  }
  moments_scalar(s, c, i);
}

TS_AVX2 void apply_avx2(const Span s, const Coeffs c, const float* root) {
  int64_t i = 0;
  for (; i + 8 <= s.n; i += 8) {
    const __m256 p =
        apply8(_mm256_loadu_ps(s.p + i), _mm256_loadu_ps(s.m + i), _mm256_loadu_ps(root + i), c);
    _mm256_storeu_ps(s.p + i, p);
    if (s.copy16) store_copy8(s.copy16 + i, p, s.copy);
  }
  apply_scalar(s, c, root, i);
}

// ---- AVX-512F: 16 lanes, the tail under a mask ----

// GCC 12 warns about the deliberately undefined source operand of its own
// AVX-512 intrinsics (_mm512_undefined_ps); the warning is about its headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

TS_AVX512 inline __m512 moments16(__m512& p, __m512 g, __m512& m, __m512& v, float* vmax,
                                  __mmask16 k, const Coeffs& c) {
  if (c.decay) {
    if (c.adamw) {
      p = _mm512_mul_ps(p, _mm512_set1_ps(c.decay_mul));
      TS_KEEP_ROUNDED(p);
    } else {
      g = _mm512_fmadd_ps(p, _mm512_set1_ps(c.wd), g);
    }
  }
  m = _mm512_fmadd_ps(g, _mm512_set1_ps(c.c1), _mm512_mul_ps(m, _mm512_set1_ps(c.b1)));
  v = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(c.c2), g), g,
                      _mm512_mul_ps(v, _mm512_set1_ps(c.b2)));
  if (!c.amsgrad) return v;
  const __m512 old = _mm512_maskz_loadu_ps(k, vmax);
  const __mmask16 nan = _mm512_cmp_ps_mask(old, v, _CMP_UNORD_Q);
  const __m512 mx = _mm512_mask_blend_ps(nan, _mm512_max_ps(old, v),
                                         _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
  _mm512_mask_storeu_ps(vmax, k, mx);
  return mx;
}

TS_AVX512 inline __m512 apply16(__m512 p, __m512 m, __m512 root, const Coeffs& c) {
  const __m512 d =
      _mm512_add_ps(_mm512_div_ps(root, _mm512_set1_ps(c.root_bc2)), _mm512_set1_ps(c.eps));
  return _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(_mm512_set1_ps(c.neg_step_size), m), d));
}

TS_AVX512 inline void store_copy16(uint16_t* dst, __m512 x, __mmask16 k, ParamCopy copy) {
  __m512i r;
  if (copy == ParamCopy::kFloat16) {
    // No masked 16-bit store in AVX-512F: the tail goes through a buffer.
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (k == 0xFFFF) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h);
    } else {
      alignas(32) uint16_t tmp[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), h);
      std::memcpy(dst, tmp, sizeof(uint16_t) * static_cast<size_t>(__builtin_popcount(k)));
    }
    return;
  }
  const __m512i b = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb), 16);
  r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, _mm512_set1_epi32(0x7fc0));
  _mm512_mask_cvtepi32_storeu_epi16(dst, k, r);
}

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

TS_AVX512 void fused_avx512(const Span s, const Coeffs c) {
  for (int64_t i = 0; i < s.n; i += 16) {
    const __mmask16 k = tail_mask(s.n - i);
    __m512 p = _mm512_maskz_loadu_ps(k, s.p + i), m = _mm512_maskz_loadu_ps(k, s.m + i);
    __m512 v = _mm512_maskz_loadu_ps(k, s.v + i);
    const __m512 r =
        moments16(p, _mm512_maskz_loadu_ps(k, s.g + i), m, v, s.vmax ? s.vmax + i : nullptr, k, c);
    _mm512_mask_storeu_ps(s.m + i, k, m);
    _mm512_mask_storeu_ps(s.v + i, k, v);
    p = apply16(p, m, _mm512_sqrt_ps(r), c);
    _mm512_mask_storeu_ps(s.p + i, k, p);
    if (s.copy16) store_copy16(s.copy16 + i, p, k, s.copy);
  }
}

TS_AVX512 void moments_avx512(const Span s, const Coeffs c) {
  for (int64_t i = 0; i < s.n; i += 16) {
    const __mmask16 k = tail_mask(s.n - i);
    __m512 p = _mm512_maskz_loadu_ps(k, s.p + i), m = _mm512_maskz_loadu_ps(k, s.m + i);
    __m512 v = _mm512_maskz_loadu_ps(k, s.v + i);
    moments16(p, _mm512_maskz_loadu_ps(k, s.g + i), m, v, s.vmax ? s.vmax + i : nullptr, k, c);
    _mm512_mask_storeu_ps(s.p + i, k, p);
    _mm512_mask_storeu_ps(s.m + i, k, m);
    _mm512_mask_storeu_ps(s.v + i, k, v);
  }
}

TS_AVX512 void apply_avx512(const Span s, const Coeffs c, const float* root) {
  for (int64_t i = 0; i < s.n; i += 16) {
    const __mmask16 k = tail_mask(s.n - i);
    const __m512 p = apply16(_mm512_maskz_loadu_ps(k, s.p + i), _mm512_maskz_loadu_ps(k, s.m + i),
                             _mm512_maskz_loadu_ps(k, root + i), c);
    _mm512_mask_storeu_ps(s.p + i, k, p);
    if (s.copy16) store_copy16(s.copy16 + i, p, k, s.copy);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}

#endif  // TS_CPU_ADAM_X86

// ---- LibTorch's square root ----

// MKL's vmsSqrt through its Fortran entry point, which the pip wheel's
// libtorch_cpu exports (the C one it does not); MKL_INT is 32-bit (LP64).
using VmsSqrt = void (*)(const int* n, const float* a, float* r, const long long* mode);
// The mode at::vml::vsqrt passes: VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE.
constexpr long long kVmlMode = 0x2 | 0x140000 | 0x100;

VmsSqrt find_mkl_sqrt() {
  if (void* f = dlsym(RTLD_DEFAULT, "VMSSQRT_")) return reinterpret_cast<VmsSqrt>(f);
  // LibTorch loaded with RTLD_LOCAL (a Python extension): look in its own library.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&at::_ops::sqrt::call), &info) == 0 || !info.dli_fname) {
    return nullptr;
  }
  void* lib = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  VmsSqrt f = reinterpret_cast<VmsSqrt>(dlsym(lib, "VMSSQRT_"));
  dlclose(lib);  // RTLD_NOLOAD took a reference; the library stays loaded by LibTorch
  return f;
}

VmsSqrt mkl_sqrt() {
  static const VmsSqrt fn = find_mkl_sqrt();
  return fn;
}

// ---- dispatch ----

enum class Path { kScalar, kAvx2, kAvx512 };

Path resolve(CpuAdamIsa isa) {
  if (isa == CpuAdamIsa::kAuto) isa = cpu_adam_best_isa();
  TS_CHECK(cpu_adam_isa_supported(isa), "CPU Adam: this CPU does not support ", to_string(isa),
           "; use CpuAdamIsa::kAuto (", to_string(cpu_adam_best_isa()), " here)");
  if (isa == CpuAdamIsa::kAvx512) return Path::kAvx512;
  if (isa == CpuAdamIsa::kAvx2) return Path::kAvx2;
  return Path::kScalar;
}

// Elements of one tensor: with the IEEE root in one pass; with MKL's, block by
// block, the moments, the roots of the block, then the update.
void run_span(const Span& whole, const Coeffs& c, Path path, VmsSqrt root_fn) {
  if (root_fn == nullptr) {
#if defined(TS_CPU_ADAM_X86)
    if (path == Path::kAvx512) return fused_avx512(whole, c);
    if (path == Path::kAvx2) return fused_avx2(whole, c);
#endif
    return fused_scalar(whole, c);
  }
  alignas(64) float roots[kRootBlock];
  for (int64_t at = 0; at < whole.n; at += kRootBlock) {
    Span s = whole;
    const int64_t n = std::min(kRootBlock, whole.n - at);
    s.p += at, s.g += at, s.m += at, s.v += at, s.n = n;
    if (s.vmax) s.vmax += at;
    if (s.copy16) s.copy16 += at;
    const int count = static_cast<int>(n);
#if defined(TS_CPU_ADAM_X86)
    if (path == Path::kAvx512) moments_avx512(s, c);
    if (path == Path::kAvx2) moments_avx2(s, c);
#endif
    if (path == Path::kScalar) moments_scalar(s, c);
    root_fn(&count, c.amsgrad ? s.vmax : s.v, roots, &kVmlMode);
#if defined(TS_CPU_ADAM_X86)
    if (path == Path::kAvx512) apply_avx512(s, c, roots);
    if (path == Path::kAvx2) apply_avx2(s, c, roots);
#endif
    if (path == Path::kScalar) apply_scalar(s, c, roots);
  }
}

void check_task(const CpuAdamTask& t) {
  const CpuAdamHyper& h = t.hyper;
  const CpuAdamBuffers& b = t.buffers;
  TS_CHECK(!h.maximize,
           "CPU Adam: maximize is not supported (LibTorch's C++ Adam has no such "
           "option); negate the gradient instead");
  TS_CHECK(h.lr >= 0 && h.eps >= 0 && h.weight_decay >= 0,
           "CPU Adam: lr, eps and weight_decay "
           "must be >= 0, got ",
           h.lr, ", ", h.eps, ", ", h.weight_decay);
  TS_CHECK(h.beta1 >= 0 && h.beta1 < 1 && h.beta2 >= 0 && h.beta2 < 1,
           "CPU Adam: betas must be in [0, 1), got (", h.beta1, ", ", h.beta2, ")");
  TS_CHECK(h.step >= 1, "CPU Adam: step is the count after this update and starts at 1, got ",
           h.step);
  TS_CHECK(b.numel >= 0, "CPU Adam: negative numel ", b.numel);
  if (b.numel == 0) return;
  TS_CHECK(b.param && b.grad && b.exp_avg && b.exp_avg_sq,
           "CPU Adam: param, grad, exp_avg and exp_avg_sq must all be given");
  TS_CHECK(!h.amsgrad || b.max_exp_avg_sq, "CPU Adam: amsgrad needs max_exp_avg_sq");
  TS_CHECK(b.copy == ParamCopy::kNone || b.param_copy,
           "CPU Adam: a 16-bit parameter copy was asked for without its buffer");
}

}  // namespace

CpuAdamIsa cpu_adam_best_isa() {
  static const CpuAdamIsa best = [] {
    if (cpu_adam_isa_supported(CpuAdamIsa::kAvx512)) return CpuAdamIsa::kAvx512;
    if (cpu_adam_isa_supported(CpuAdamIsa::kAvx2)) return CpuAdamIsa::kAvx2;
    return CpuAdamIsa::kScalar;
  }();
  return best;
}

bool cpu_adam_isa_supported(CpuAdamIsa isa) {
  switch (isa) {
    case CpuAdamIsa::kAuto:
    case CpuAdamIsa::kScalar:
      return true;
#if defined(TS_CPU_ADAM_X86)
    case CpuAdamIsa::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case CpuAdamIsa::kAvx512:
      // Also checks that the OS saves the zmm registers (libgcc reads XCR0).
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && cpu_adam_isa_supported(CpuAdamIsa::kAvx2);
#else
    case CpuAdamIsa::kAvx2:
    case CpuAdamIsa::kAvx512:
      return false;
#endif
  }
  return false;
}

bool cpu_adam_uses_mkl_sqrt() { return mkl_sqrt() != nullptr; }

std::string to_string(CpuAdamIsa isa) {
  switch (isa) {
    case CpuAdamIsa::kAuto:
      return "auto";
    case CpuAdamIsa::kScalar:
      return "scalar";
    case CpuAdamIsa::kAvx2:
      return "avx2";
    case CpuAdamIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

std::string cpu_adam_describe(const CpuAdamOptions& options) {
  const CpuAdamIsa isa = options.isa == CpuAdamIsa::kAuto ? cpu_adam_best_isa() : options.isa;
  std::string root = "IEEE sqrt";
  if (options.sqrt == CpuAdamSqrt::kLibTorch) {
    root = cpu_adam_uses_mkl_sqrt() ? "LibTorch's sqrt (MKL vsSqrt)" : "LibTorch's sqrt (IEEE)";
  }
  return to_string(isa) + ", " + root + ", " + std::to_string(at::get_num_threads()) + " threads";
}

void cpu_adam_update(const std::vector<CpuAdamTask>& tasks, const CpuAdamOptions& options) {
  const Path path = resolve(options.isa);
  const VmsSqrt root_fn = options.sqrt == CpuAdamSqrt::kLibTorch ? mkl_sqrt() : nullptr;
  std::vector<Coeffs> coeffs;
  std::vector<int64_t> start{0};  // prefix sums of numel
  coeffs.reserve(tasks.size());
  start.reserve(tasks.size() + 1);
  for (const auto& t : tasks) {
    check_task(t);
    coeffs.push_back(coeffs_of(t.hyper));
    start.push_back(start.back() + t.buffers.numel);
  }
  const int64_t total = start.back();
  if (total == 0) return;
  // Ranges of whole blocks over the concatenation of all tasks, a few per
  // thread, so that threads finishing early take more.
  const int64_t units = (total + kBlock - 1) / kBlock;
  const int64_t threads = std::max(1, at::get_num_threads());
  const int64_t per_chunk =
      std::max(kSerialNumel / kBlock, (units + 8 * threads - 1) / (8 * threads));
  const int64_t chunks = (units + per_chunk - 1) / per_chunk;
  parallel_chunks(chunks, [&](int64_t chunk) {
    int64_t at = chunk * per_chunk * kBlock;
    const int64_t end = std::min(total, (chunk + 1) * per_chunk * kBlock);
    size_t t =
        static_cast<size_t>(std::upper_bound(start.begin(), start.end(), at) - start.begin()) - 1;
    while (at < end) {
      const int64_t n = std::min(end, start[t + 1]) - at;
      if (n > 0) run_span(offset(tasks[t].buffers, at - start[t], n), coeffs[t], path, root_fn);
      at += n;
      ++t;
    }
  });
}

void cpu_adam_update(const CpuAdamBuffers& buffers, const CpuAdamHyper& hyper,
                     const CpuAdamOptions& options) {
  cpu_adam_update(std::vector<CpuAdamTask>{{buffers, hyper}}, options);
}

namespace {

void check_tensor(const at::Tensor& t, const char* name, int64_t numel, bool sixteen_bit = false) {
  TS_CHECK(t.defined(), "cpu_adam_step: ", name, " is undefined");
  TS_CHECK(t.device().is_cpu(), "cpu_adam_step: ", name, " is on ", t.device(),
           "; the CPU Adam steps CPU tensors (use torch::optim::Adam/AdamW on other devices)");
  TS_CHECK(t.layout() == c10::kStrided, "cpu_adam_step: ", name, " is ", t.layout(),
           "; the CPU Adam needs dense tensors");
  if (sixteen_bit) {
    TS_CHECK(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf,
             "cpu_adam_step: ", name, " is ", t.scalar_type(), "; it must be BFloat16 or Half");
  } else {
    TS_CHECK(t.scalar_type() == at::kFloat, "cpu_adam_step: ", name, " is ", t.scalar_type(),
             "; the CPU Adam updates float32 (keep float32 masters, or use torch::optim::Adam/"
             "AdamW for other dtypes)");
  }
  TS_CHECK(t.is_contiguous(), "cpu_adam_step: ", name,
           " is not contiguous; pass t.contiguous() (and copy the result back) or use "
           "torch::optim::Adam/AdamW");
  TS_CHECK(t.numel() == numel, "cpu_adam_step: ", name, " has ", t.numel(),
           " elements but param has ", numel);
}

}  // namespace

void cpu_adam_step(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                   const at::Tensor& exp_avg_sq, const CpuAdamHyper& hyper,
                   const at::Tensor& max_exp_avg_sq, const at::Tensor& param_copy,
                   const CpuAdamOptions& options) {
  TS_CHECK(param.defined(), "cpu_adam_step: param is undefined");
  const int64_t n = param.numel();
  check_tensor(param, "param", n);
  check_tensor(grad, "grad", n);
  check_tensor(exp_avg, "exp_avg", n);
  check_tensor(exp_avg_sq, "exp_avg_sq", n);
  TS_CHECK(!hyper.amsgrad || max_exp_avg_sq.defined(),
           "cpu_adam_step: amsgrad needs max_exp_avg_sq (zeros like param before the first step)");
  if (hyper.amsgrad) check_tensor(max_exp_avg_sq, "max_exp_avg_sq", n);
  if (param_copy.defined()) check_tensor(param_copy, "param_copy", n, /*sixteen_bit=*/true);
  TS_CHECK(!(at::GradMode::is_enabled() && param.requires_grad()),
           "cpu_adam_step: param requires grad and grad mode is on; step under "
           "at::NoGradGuard as optimizers do");
  CpuAdamBuffers b;
  b.param = param.data_ptr<float>();
  b.grad = grad.data_ptr<float>();
  b.exp_avg = exp_avg.data_ptr<float>();
  b.exp_avg_sq = exp_avg_sq.data_ptr<float>();
  if (hyper.amsgrad) b.max_exp_avg_sq = max_exp_avg_sq.data_ptr<float>();
  if (param_copy.defined()) {
    b.param_copy = param_copy.data_ptr();
    b.copy = param_copy.scalar_type() == at::kBFloat16 ? ParamCopy::kBFloat16 : ParamCopy::kFloat16;
  }
  b.numel = n;
  cpu_adam_update(b, hyper, options);
  // As an in-place ATen op would: autograd notices a saved tensor changed.
  for (const at::Tensor* t : {&param, &exp_avg, &exp_avg_sq, &max_exp_avg_sq, &param_copy}) {
    if (t->defined()) t->unsafeGetTensorImpl()->bump_version();
  }
}

}  // namespace tessera::runtime
