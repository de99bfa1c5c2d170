// Compiled with -mavx2 -mf16c (src/tessera/CMakeLists.txt); see the header for
// why nothing from c10/ATen may be included here.
#include "tessera/comm/shm/shm_reduce_avx2.h"

#include <immintrin.h>

#include <cstring>

namespace tessera::comm::shm::avx2 {
namespace {

constexpr int kLanes = 8;

inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline void store_f16(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

inline __m256 load_bf16(const uint16_t* p) {
  __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// Round to nearest even like c10::BFloat16 (NaN becomes 0x7FC0).
inline void store_bf16(uint16_t* p, __m256 v) {
  __m256i bits = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF));
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), nan);
  __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(rounded),
                                    _mm256_extracti128_si256(rounded, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

// The generic kernels' operators: Min is `b < a ? b : a`, Max `a < b ? b : a`;
// _mm256_min_ps(x, y) is `x < y ? x : y`, so the operands are swapped.
inline __m256 apply(Op16 op, __m256 a, __m256 b) {
  switch (op) {
    case Op16::kSum:
    case Op16::kAvg:
      return _mm256_add_ps(a, b);
    case Op16::kProduct:
      return _mm256_mul_ps(a, b);
    case Op16::kMin:
      return _mm256_min_ps(b, a);
    case Op16::kMax:
      return _mm256_max_ps(b, a);
  }
  return a;
}

template <bool kBf16>
void reduce_typed(Op16 op, const uint16_t* const* srcs, int nsrcs, uint16_t* out, uint16_t* out2,
                  int64_t count) {
  auto load = [](const uint16_t* p) { return kBf16 ? load_bf16(p) : load_f16(p); };
  auto store = [](uint16_t* p, __m256 v) { kBf16 ? store_bf16(p, v) : store_f16(p, v); };
  const __m256 divisor = _mm256_set1_ps(static_cast<float>(nsrcs));
  const int64_t full = count / kLanes * kLanes;
  for (int64_t i = 0; i < full; i += kLanes) {
    __m256 acc = load(srcs[0] + i);
    for (int k = 1; k < nsrcs; ++k) acc = apply(op, acc, load(srcs[k] + i));
    if (op == Op16::kAvg) acc = _mm256_div_ps(acc, divisor);
    store(out + i, acc);
    if (out2 != nullptr) store(out2 + i, acc);
  }
  const int64_t tail = count - full;
  if (tail == 0) return;
  // The last partial vector: each source through a zero-padded 8-lane buffer.
  auto load_tail = [&](const uint16_t* p) {
    uint16_t lanes[kLanes] = {};
    std::memcpy(lanes, p, static_cast<size_t>(tail) * sizeof(uint16_t));
    return load(lanes);
  };
  __m256 acc = load_tail(srcs[0] + full);
  for (int k = 1; k < nsrcs; ++k) acc = apply(op, acc, load_tail(srcs[k] + full));
  if (op == Op16::kAvg) acc = _mm256_div_ps(acc, divisor);
  uint16_t res[kLanes];
  store(res, acc);
  std::memcpy(out + full, res, static_cast<size_t>(tail) * sizeof(uint16_t));
  if (out2 != nullptr) std::memcpy(out2 + full, res, static_cast<size_t>(tail) * sizeof(uint16_t));
}

}  // namespace

bool available() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return ok;
}

void reduce16(Half16 type, Op16 op, const void* const* srcs, int nsrcs, void* out, void* out2,
              int64_t count) {
  auto s = reinterpret_cast<const uint16_t* const*>(srcs);
  auto o = static_cast<uint16_t*>(out);
  auto o2 = static_cast<uint16_t*>(out2);
  if (type == Half16::kBFloat16) {
    reduce_typed<true>(op, s, nsrcs, o, o2, count);
  } else {
    reduce_typed<false>(op, s, nsrcs, o, o2, count);
  }
}

}  // namespace tessera::comm::shm::avx2
