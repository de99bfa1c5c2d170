// Reduction kernels of the shm backend: out = op over several source arrays.
//
// The kernels work through L1-sized blocks: each block is accumulated into a
// stack buffer in rank order (src0 op src1 op src2 ...), so results are the same
// bit for bit as a sequential reference in that order, and each source is read
// from memory once. Simple __restrict loops that GCC vectorizes at -O3; half
// types (float16, bfloat16) accumulate in float32 and round once at the end;
// on CPUs with AVX2 and F16C they go through shm_reduce_avx2.h instead, with the
// same results bit for bit. AVG divides the float (or integer) sum by the number
// of sources.
//
// Stateless and thread-safe.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

#include "tessera/comm/base/reduce_op.h"

namespace tessera::comm::shm {

// True for the dtypes reduce() handles: float32/64, float16, bfloat16, int32/64.
bool can_reduce(c10::ScalarType dtype);

// out[i] = srcs[0][i] op srcs[1][i] op ... for i < count; nsrcs >= 1. `out2`, if
// not null, receives a second copy of the result. An output may be one of the
// sources (each block is read completely before it is written), but must not
// overlap a source at a different offset.
void reduce(c10::ScalarType dtype, ReduceOp op, const void* const* srcs, int nsrcs, void* out,
            void* out2, int64_t count);
// The same without the AVX2 dispatch (the reference the fast kernels are tested against).
void reduce_portable(c10::ScalarType dtype, ReduceOp op, const void* const* srcs, int nsrcs,
                     void* out, void* out2, int64_t count);

}  // namespace tessera::comm::shm
