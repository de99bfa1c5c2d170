// AVX2 + F16C reduction kernels for the 16-bit float types, used by shm_reduce.cpp
// when the CPU has both (checked once at run time). The generic kernels convert
// float16 one element at a time, which makes a float16 all_reduce several times
// slower than float32; these convert eight at a time in hardware.
//
// Results are bit for bit those of the generic kernels: float32 accumulation in
// source order, one rounding to nearest-even at the end, the same NaN and
// min/max conventions. This header and its .cpp include nothing from c10 or
// ATen on purpose: the .cpp is compiled with -mavx2 -mf16c, and sharing inline
// library code with generic translation units would let the linker pick AVX2
// copies for machines without it.
//
// Stateless and thread-safe.
#pragma once

#include <cstdint>

namespace tessera::comm::shm::avx2 {

enum class Half16 { kFloat16, kBFloat16 };
enum class Op16 { kSum, kAvg, kProduct, kMin, kMax };

// True when this CPU runs these kernels (AVX2 and F16C).
bool available();

// As shm::reduce() for float16/bfloat16 arrays (see shm_reduce.h).
void reduce16(Half16 type, Op16 op, const void* const* srcs, int nsrcs, void* out, void* out2,
              int64_t count);

}  // namespace tessera::comm::shm::avx2
