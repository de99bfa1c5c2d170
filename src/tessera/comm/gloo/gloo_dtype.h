// Element types and reduction kernels of the gloo backend.
//
// Gloo moves bytes and calls back into a reduction function for arithmetic, so
// the backend supplies one kernel per (dtype, op). Half types are reduced in
// float32 per pair of values but stored back in their own type after every
// step, which is why the backend reports them as not reduced natively and the
// ProcessGroup upcasts them. Pure functions; thread-safe.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "tessera/comm/base/reduce_op.h"
#include "tessera/core/check.h"

namespace tessera::comm {

// out[i] = a[i] op b[i] for n elements; out may alias a or b.
using GlooReduceFn = std::function<void(void* out, const void* a, const void* b, size_t n)>;

// The kernel for (dtype, op). CommError "backend gloo does not support ..." for
// kAvg (the ProcessGroup divides) and for dtypes outside gloo_dtype_supported().
GlooReduceFn gloo_reduce_fn(at::ScalarType dtype, ReduceOp op);

// float32/64, float16, bfloat16, int8/32/64, uint8 and bool.
bool gloo_dtype_supported(at::ScalarType dtype);

// Calls f(T{}) with the C++ element type of `dtype`; gloo only needs its size.
template <typename F>
void gloo_dispatch(at::ScalarType dtype, F&& f) {
  switch (dtype) {
    case at::kFloat: return f(float{});
    case at::kDouble: return f(double{});
    case at::kHalf: return f(c10::Half{});
    case at::kBFloat16: return f(c10::BFloat16{});
    case at::kInt: return f(int32_t{});
    case at::kLong: return f(int64_t{});
    case at::kByte: return f(uint8_t{});
    case at::kChar: return f(int8_t{});
    case at::kBool: return f(bool{});
    default:
      TS_THROW(CommError, "backend gloo does not support dtype ", dtype,
               " (use float32/64, float16, bfloat16, int8/32/64, uint8 or bool)");
  }
}

}  // namespace tessera::comm
