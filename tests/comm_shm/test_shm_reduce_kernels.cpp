// The AVX2/F16C kernels for float16 and bfloat16 against the portable ones, bit
// for bit: every op, 1-5 sources, lengths around the 8-lane vector, and values
// that stress rounding (ties, subnormals, infinities, NaN, signed zeros).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tessera/comm/shm/shm_reduce.h"
#include "tessera/comm/shm/shm_reduce_avx2.h"

namespace tessera::comm::shm {
namespace {

// Random 16-bit patterns (every encoding, NaN included) mixed with hand-picked ones.
at::Tensor awkward(int64_t n, at::ScalarType dtype, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto bits = at::randint(0, 1 << 16, {n}, gen, at::kInt);
  const std::vector<int> special = dtype == at::kHalf
      ? std::vector<int>{0x0000, 0x8000, 0x0001, 0x03ff, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x3c00, 0x3c01}
      : std::vector<int>{0x0000, 0x8000, 0x0001, 0x007f, 0x7f7f, 0x7f80, 0xff80, 0x7fc0, 0x3f80, 0x3f81};
  auto acc = bits.accessor<int, 1>();
  for (int64_t i = 0; i < n; i += 3) acc[i] = special[(i / 3) % special.size()];
  // Half the elements from a narrow range so sums round at ties often.
  auto values = at::randn({n}, gen).mul_(4).to(dtype);
  auto out = at::empty({n}, dtype);
  std::memcpy(out.data_ptr(), bits.to(at::kShort).data_ptr(), n * 2);
  auto mask = at::arange(n) % 2 == 0;
  return at::where(mask, values, out);
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  // NaN payloads may differ between the two conversions: any NaN matches any NaN.
  auto fa = a.to(at::kFloat), fb = b.to(at::kFloat);
  auto both_nan = fa.isnan() & fb.isnan();
  auto ia = a.view(at::kShort), ib = b.view(at::kShort);
  return (both_nan | ia.eq(ib)).all().item<bool>();
}

TEST(ShmReduceKernels, Avx2MatchesPortableBitForBit) {
  if (!avx2::available()) GTEST_SKIP() << "this CPU has no AVX2/F16C";
  for (auto dtype : {at::kHalf, at::kBFloat16}) {
    for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProduct, ReduceOp::kMin,
                    ReduceOp::kMax}) {
      for (int nsrcs = 1; nsrcs <= 5; ++nsrcs) {
        for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 1001}) {
          std::vector<at::Tensor> in;
          std::vector<const void*> srcs;
          for (int s = 0; s < nsrcs; ++s) {
            in.push_back(awkward(n, dtype, 100 * nsrcs + s + n));
            srcs.push_back(in.back().data_ptr());
          }
          auto fast = at::empty({n}, dtype), fast2 = at::empty({n}, dtype);
          auto ref = at::empty({n}, dtype);
          reduce(dtype, op, srcs.data(), nsrcs, fast.data_ptr(), fast2.data_ptr(), n);
          reduce_portable(dtype, op, srcs.data(), nsrcs, ref.data_ptr(), nullptr, n);
          ASSERT_TRUE(same_bits(fast, ref)) << dtype << " op " << static_cast<int>(op)
                                            << " sources " << nsrcs << " n " << n;
          ASSERT_TRUE(same_bits(fast2, ref));
        }
      }
    }
  }
}

TEST(ShmReduceKernels, OutputMayAliasTheFirstSource) {
  for (auto dtype : {at::kHalf, at::kBFloat16}) {
    auto a = awkward(1003, dtype, 7), b = awkward(1003, dtype, 8);
    auto ref = at::empty({1003}, dtype);
    const void* srcs[] = {a.data_ptr(), b.data_ptr()};
    reduce_portable(dtype, ReduceOp::kSum, srcs, 2, ref.data_ptr(), nullptr, 1003);
    reduce(dtype, ReduceOp::kSum, srcs, 2, a.data_ptr(), nullptr, 1003);
    EXPECT_TRUE(same_bits(a, ref)) << dtype;
  }
}

}  // namespace
}  // namespace tessera::comm::shm
