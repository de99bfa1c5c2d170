#include "tessera/comm/shm/shm_reduce.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstring>
#include <type_traits>

#include "tessera/comm/shm/shm_reduce_avx2.h"
#include "tessera/core/check.h"

namespace tessera::comm::shm {
namespace {

// Elements per block: 16 KB of float32 accumulators stays in L1 with its sources.
constexpr int64_t kBlock = 4096;

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    return a + b;
  }
};
struct Prod {
  template <typename T>
  static T apply(T a, T b) {
    return a * b;
  }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    return b < a ? b : a;
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    return a < b ? b : a;
  }
};

template <typename Acc, typename T>
inline Acc load(T v) {
  return static_cast<Acc>(v);
}

// acc[i] = a[i] op b[i]
template <typename Op, typename Acc, typename T>
void first_pair(Acc* __restrict acc, const T* __restrict a, const T* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = Op::apply(load<Acc>(a[i]), load<Acc>(b[i]));
}

// acc[i] = acc[i] op b[i]
template <typename Op, typename Acc, typename T>
void accumulate(Acc* __restrict acc, const T* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = Op::apply(acc[i], load<Acc>(b[i]));
}

template <typename Acc, typename T>
void store(T* __restrict out, const Acc* __restrict acc, int64_t n) {
  if constexpr (std::is_same_v<Acc, T>) {
    std::memcpy(out, acc, n * sizeof(T));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(acc[i]);
  }
}

template <typename Op, typename T, typename Acc>
void reduce_typed(const void* const* srcs_v, int nsrcs, void* out_v, void* out2_v, int64_t count,
                  bool avg) {
  const T* const* srcs = reinterpret_cast<const T* const*>(srcs_v);
  T* out = static_cast<T*>(out_v);
  T* out2 = static_cast<T*>(out2_v);
  alignas(64) Acc acc[kBlock];
  const Acc divisor = static_cast<Acc>(nsrcs);
  for (int64_t start = 0; start < count; start += kBlock) {
    int64_t n = std::min(kBlock, count - start);
    if (nsrcs == 1) {
      for (int64_t i = 0; i < n; ++i) acc[i] = load<Acc>(srcs[0][start + i]);
    } else {
      first_pair<Op>(acc, srcs[0] + start, srcs[1] + start, n);
      for (int s = 2; s < nsrcs; ++s) accumulate<Op>(acc, srcs[s] + start, n);
    }
    if (avg) {
      for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] / divisor;
    }
    store(out + start, acc, n);
    if (out2 != nullptr) store(out2 + start, acc, n);
  }
}

template <typename T, typename Acc>
void reduce_op(ReduceOp op, const void* const* srcs, int nsrcs, void* out, void* out2,
               int64_t count) {
  switch (op) {
    case ReduceOp::kSum:
      return reduce_typed<Sum, T, Acc>(srcs, nsrcs, out, out2, count, false);
    case ReduceOp::kAvg:
      return reduce_typed<Sum, T, Acc>(srcs, nsrcs, out, out2, count, true);
    case ReduceOp::kProduct:
      return reduce_typed<Prod, T, Acc>(srcs, nsrcs, out, out2, count, false);
    case ReduceOp::kMin:
      return reduce_typed<Min, T, Acc>(srcs, nsrcs, out, out2, count, false);
    case ReduceOp::kMax:
      return reduce_typed<Max, T, Acc>(srcs, nsrcs, out, out2, count, false);
  }
}

}  // namespace

bool can_reduce(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
    case c10::kDouble:
    case c10::kHalf:
    case c10::kBFloat16:
    case c10::kInt:
    case c10::kLong:
      return true;
    default:
      return false;
  }
}

namespace {
avx2::Op16 to_op16(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return avx2::Op16::kSum;
    case ReduceOp::kAvg: return avx2::Op16::kAvg;
    case ReduceOp::kProduct: return avx2::Op16::kProduct;
    case ReduceOp::kMin: return avx2::Op16::kMin;
    case ReduceOp::kMax: return avx2::Op16::kMax;
  }
  return avx2::Op16::kSum;
}
}  // namespace

void reduce(c10::ScalarType dtype, ReduceOp op, const void* const* srcs, int nsrcs, void* out,
            void* out2, int64_t count) {
  if ((dtype == c10::kHalf || dtype == c10::kBFloat16) && avx2::available()) {
    return avx2::reduce16(dtype == c10::kHalf ? avx2::Half16::kFloat16 : avx2::Half16::kBFloat16,
                          to_op16(op), srcs, nsrcs, out, out2, count);
  }
  reduce_portable(dtype, op, srcs, nsrcs, out, out2, count);
}

void reduce_portable(c10::ScalarType dtype, ReduceOp op, const void* const* srcs, int nsrcs,
                     void* out, void* out2, int64_t count) {
  switch (dtype) {
    case c10::kFloat:
      return reduce_op<float, float>(op, srcs, nsrcs, out, out2, count);
    case c10::kDouble:
      return reduce_op<double, double>(op, srcs, nsrcs, out, out2, count);
    case c10::kHalf:
      return reduce_op<c10::Half, float>(op, srcs, nsrcs, out, out2, count);
    case c10::kBFloat16:
      return reduce_op<c10::BFloat16, float>(op, srcs, nsrcs, out, out2, count);
    case c10::kInt:
      return reduce_op<int32_t, int32_t>(op, srcs, nsrcs, out, out2, count);
    case c10::kLong:
      return reduce_op<int64_t, int64_t>(op, srcs, nsrcs, out, out2, count);
    default:
      TS_THROW(CommError, "backend shm does not support reductions of dtype ", dtype);
  }
}

}  // namespace tessera::comm::shm
