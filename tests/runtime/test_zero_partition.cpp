// ZeRO partition math, without processes: ranges, pieces, owners, buckets.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "tessera/core/error.h"
#include "tessera/runtime/zero/partition.h"

namespace tessera::runtime::zero {
namespace {

TEST(FlatPartition, TheDocumentedExample) {
  FlatPartition p({300, 5, 1000}, 4, 16);
  EXPECT_EQ(p.total_numel(), 1305);
  EXPECT_EQ(p.padded_numel(), 1344);
  EXPECT_EQ(p.shard_numel(), 336);
  EXPECT_EQ(p.pieces_of_rank(0),
            (std::vector<Piece>{{0, 0, 0, 300}, {1, 0, 300, 5}, {2, 0, 305, 31}}));
  EXPECT_EQ(p.pieces_of_rank(1), (std::vector<Piece>{{2, 31, 0, 336}}));
  EXPECT_EQ(p.pieces_of_rank(3), (std::vector<Piece>{{2, 703, 0, 297}}));
  EXPECT_EQ(p.owners(2), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(p.owners(1), (std::vector<int>{0}));
}

// Every element of every parameter is owned by exactly one rank, ranges are
// aligned and equal, for many shapes, world sizes and alignments.
TEST(FlatPartition, PiecesTileEveryParameterExactlyOnce) {
  const std::vector<std::vector<int64_t>> cases = {
      {1}, {0, 7, 0}, {3, 3, 3}, {1000}, {17, 1, 255, 256, 257}, {5, 0, 4096, 3}};
  for (const auto& numels : cases) {
    for (int world : {1, 2, 3, 4, 7}) {
      for (int64_t align : {1, 16}) {
        FlatPartition p(numels, world, align);
        EXPECT_EQ(p.shard_numel() % align, 0);
        EXPECT_GE(p.padded_numel(), p.total_numel());
        // Padding is less than one alignment quantum (or one quantum for empty units).
        EXPECT_LE(p.padded_numel() - p.total_numel(), align * world);
        std::map<size_t, std::vector<int>> covered;
        for (size_t i = 0; i < numels.size(); ++i) covered[i].assign(numels[i], 0);
        for (int r = 0; r < world; ++r) {
          int64_t last_end = 0;
          for (const Piece& pc : p.pieces_of_rank(r)) {
            EXPECT_GE(pc.shard_offset, last_end);  // in flat order, no overlap
            last_end = pc.shard_offset + pc.numel;
            EXPECT_LE(last_end, p.shard_numel());
            // The piece sits where the flat layout says.
            EXPECT_EQ(p.range_begin(r) + pc.shard_offset, p.offset(pc.param) + pc.param_offset);
            for (int64_t e = 0; e < pc.numel; ++e) ++covered[pc.param][pc.param_offset + e];
            const auto owners = p.owners(pc.param);
            EXPECT_NE(std::find(owners.begin(), owners.end(), r), owners.end());
          }
        }
        for (auto& [param, counts] : covered) {
          for (int c : counts) ASSERT_EQ(c, 1) << "param " << param << " world " << world;
        }
      }
    }
  }
}

TEST(FlatPartition, MoreRanksThanElementsLeavesSomeRanksOnlyPadding) {
  FlatPartition p({3}, 4, 1);
  EXPECT_EQ(p.shard_numel(), 1);
  EXPECT_EQ(p.pieces_of_rank(3).size(), 0u);
  EXPECT_EQ(p.owners(0), (std::vector<int>{0, 1, 2}));
  EXPECT_THROW(FlatPartition({3}, 0), ConfigError);
  EXPECT_THROW(p.pieces_of_rank(4), ConfigError);
}

TEST(BucketUnits, ReverseOrderLargeParametersAloneEmptiesSkipped) {
  // bucket of 10 elements; from the end: 4 (p5) + 8 (p4) >= 10 closes {4,5};
  // p3 = 0 skipped; p2 = 30 is large: alone; p1 + p0 = 2 + 3 left at the end.
  auto units = bucket_units({3, 2, 30, 0, 8, 4}, 10);
  EXPECT_EQ(units, (std::vector<std::vector<size_t>>{{4, 5}, {2}, {0, 1}}));
  EXPECT_EQ(bucket_units({5, 5}, 1000), (std::vector<std::vector<size_t>>{{0, 1}}));
  EXPECT_THROW(bucket_units({1}, 0), ConfigError);
}

}  // namespace
}  // namespace tessera::runtime::zero
