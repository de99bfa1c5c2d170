// Bucket assignment: reverse registration order, first bucket small, caps,
// dtype separation, every parameter exactly once.
#include <gtest/gtest.h>

#include <set>

#include "tessera/core/error.h"
#include "tessera/runtime/ddp/bucket_assignment.h"

namespace tessera::runtime::ddp {
namespace {

std::vector<ParamSpec> floats(std::vector<int64_t> numels) {
  std::vector<ParamSpec> v;
  for (auto n : numels) v.push_back({n, c10::kFloat});
  return v;
}

TEST(BucketAssignment, ReverseOrderWithSmallFirstBucket) {
  // 4 bytes per element: first cap 16 bytes (4 elems), cap 40 bytes (10 elems).
  auto b = assign_buckets(floats({3, 3, 3, 3, 3, 3}), 40, 16);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].params, (std::vector<size_t>{5, 4}));        // 6 elems >= 4: closed
  EXPECT_EQ(b[1].params, (std::vector<size_t>{3, 2, 1, 0}));  // 12 >= 10 closed at 0
  EXPECT_EQ(b[1].numel, 12);
  // A partial last bucket is kept: 7 params of 3 leave param 0 alone at the end.
  auto c = assign_buckets(floats({3, 3, 3, 3, 3, 3, 3}), 40, 16);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[2].params, (std::vector<size_t>{0}));
}

TEST(BucketAssignment, EveryParamExactlyOnceAndBigParamAlone) {
  auto b = assign_buckets(floats({1000, 1, 2, 0, 5000, 7}), 400, 40);
  std::multiset<size_t> seen;
  for (auto& bucket : b) {
    int64_t n = 0;
    for (auto p : bucket.params) seen.insert(p), n += std::vector<int64_t>{1000, 1, 2, 0, 5000, 7}[p];
    EXPECT_EQ(n, bucket.numel);
  }
  EXPECT_EQ(seen, (std::multiset<size_t>{0, 1, 2, 4, 5}));  // empty param 3 skipped
  // Fix from review: 5000 and 1000 floats exceed the caps (10 and 100 floats), so
  // each is alone; the small ones before them close their own buckets first.
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].params, (std::vector<size_t>{5}));
  EXPECT_EQ(b[1].params, (std::vector<size_t>{4}));
  EXPECT_EQ(b[2].params, (std::vector<size_t>{2, 1}));
  EXPECT_EQ(b[3].params, (std::vector<size_t>{0}));
}

TEST(BucketAssignment, DtypesNeverShareABucket) {
  std::vector<ParamSpec> p = {{10, c10::kFloat}, {10, c10::kHalf}, {10, c10::kFloat},
                              {10, c10::kHalf}};
  auto b = assign_buckets(p, 1 << 20, 1 << 20);
  ASSERT_EQ(b.size(), 2u);
  for (auto& bucket : b) {
    for (auto i : bucket.params) EXPECT_EQ(p[i].dtype, bucket.dtype);
  }
  // The dtype of the last registered parameter is expected ready first.
  EXPECT_EQ(b[0].dtype, c10::kHalf);
}

TEST(BucketAssignment, DefaultsMatchPyTorch) {
  // 25 MiB cap, 1 MiB first bucket: 300k floats (1.2 MB) close the first bucket alone.
  auto b = assign_buckets(floats({300000, 300000, 300000}));
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].params, (std::vector<size_t>{2}));
  EXPECT_EQ(b[1].params, (std::vector<size_t>{1, 0}));
}

TEST(BucketAssignment, RejectsNonPositiveCaps) {
  EXPECT_THROW(assign_buckets(floats({1}), 0, 10), ConfigError);
  EXPECT_THROW(assign_buckets(floats({1}), 10, -1), ConfigError);
}

}  // namespace
}  // namespace tessera::runtime::ddp
