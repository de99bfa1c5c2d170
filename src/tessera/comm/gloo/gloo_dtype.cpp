#include "tessera/comm/gloo/gloo_dtype.h"

namespace tessera::comm {
namespace {

// Arithmetic goes through the promoted type (float for half types, int for
// small integers) and is cast back, so every dtype shares one template.
struct Sum {
  template <typename T>
  static T apply(T a, T b) { return static_cast<T>(a + b); }
};
struct Product {
  template <typename T>
  static T apply(T a, T b) { return static_cast<T>(a * b); }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) { return b < a ? b : a; }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) { return a < b ? b : a; }
};

template <typename T, typename Op>
void reduce_loop(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = Op::apply(x[i], y[i]);
}

// bool: sum is logical or and product logical and, as in torch.
template <>
void reduce_loop<bool, Sum>(void* out, const void* a, const void* b, size_t n) {
  reduce_loop<bool, Max>(out, a, b, n);
}
template <>
void reduce_loop<bool, Product>(void* out, const void* a, const void* b, size_t n) {
  reduce_loop<bool, Min>(out, a, b, n);
}

template <typename T>
GlooReduceFn for_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return reduce_loop<T, Sum>;
    case ReduceOp::kProduct: return reduce_loop<T, Product>;
    case ReduceOp::kMin: return reduce_loop<T, Min>;
    case ReduceOp::kMax: return reduce_loop<T, Max>;
    case ReduceOp::kAvg: break;
  }
  TS_THROW(CommError, "backend gloo does not support reduce op ", to_string(op),
           " (the ProcessGroup computes avg as sum then divide)");
}

}  // namespace

GlooReduceFn gloo_reduce_fn(at::ScalarType dtype, ReduceOp op) {
  GlooReduceFn fn;
  gloo_dispatch(dtype, [&](auto tag) { fn = for_op<decltype(tag)>(op); });
  return fn;
}

bool gloo_dtype_supported(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16: case at::kInt:
    case at::kLong: case at::kByte: case at::kChar: case at::kBool:
      return true;
    default:
      return false;
  }
}

}  // namespace tessera::comm
