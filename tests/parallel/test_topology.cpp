// The process mesh as a value: Megatron's rank order (tp innermost, then dp,
// then pp), every axis's groups partition the world, and layouts that do not
// divide the world are ConfigErrors naming the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tessera/core/error.h"
#include "tessera/parallel/topology.h"

namespace tessera::parallel {
namespace {

TEST(Topology, RankOrderIsTensorThenDataThenPipeline) {
  Topology t(8, 2, 2);
  EXPECT_EQ(t.dp(), 2);
  EXPECT_EQ(t.coord(5), (MeshCoord{1, 0, 1}));
  EXPECT_EQ(t.tp_group_of(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(t.dp_group_of(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(t.pp_group_of(5), (std::vector<int>{1, 5}));
  EXPECT_EQ(t.describe(), "tp2 x dp2 x pp2 (8 ranks)");
  for (int r = 0; r < 8; ++r) EXPECT_EQ(t.rank_of(t.coord(r)), r);
}

TEST(Topology, ContextParallelSitsBetweenTensorAndData) {
  Topology t(16, 2, 2, 2);  // dp = 2
  EXPECT_EQ(t.dp(), 2);
  EXPECT_EQ(t.cp(), 2);
  MeshCoord c;
  c.tp = 1;
  c.cp = 1;
  c.dp = 0;
  c.pp = 1;
  EXPECT_EQ(t.coord(11), c);
  EXPECT_EQ(t.cp_group_of(11), (std::vector<int>{9, 11}));
  EXPECT_EQ(t.dp_group_of(11), (std::vector<int>{11, 15}));
  EXPECT_EQ(t.replica_group_of(11), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(t.pp_group_of(11), (std::vector<int>{3, 11}));
  EXPECT_EQ(t.describe(), "tp2 x cp2 x dp2 x pp2 (16 ranks)");
  for (int r = 0; r < 16; ++r) EXPECT_EQ(t.rank_of(t.coord(r)), r);
  EXPECT_EQ(t.replica_groups().size(), 4u);
  EXPECT_EQ(t.cp_groups().size(), 8u);
  // Without cp the replica group is the dp group.
  Topology plain(8, 2, 2);
  EXPECT_EQ(plain.replica_group_of(5), plain.dp_group_of(5));
  EXPECT_THROW(Topology(8, 2, 1, 3), ConfigError);
}

TEST(Topology, ExpertGroupsSplitTheDataParallelRanks) {
  Topology t(16, 2, 1);  // dp 8
  // Rank 5: tp 1, dp 2. ep 4: dp ranks 0-3 share experts between them.
  EXPECT_EQ(t.ep_group_of(5, 4), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(t.expert_dp_group_of(5, 4), (std::vector<int>{5, 13}));
  EXPECT_EQ(t.ep_groups(4).size(), 4u);
  EXPECT_EQ(t.expert_dp_groups(4).size(), 8u);
  EXPECT_EQ(t.ep_group_of(5, 1), (std::vector<int>{5}));
  EXPECT_EQ(t.expert_dp_group_of(5, 1), t.dp_group_of(5));
  EXPECT_THROW(t.ep_group_of(5, 3), ConfigError);
  // With cp the ep group stays inside one cp rank; the ranks holding the same
  // experts span the cp ranks too. World 16 = tp 2 x cp 2 x dp 4: rank 5 is
  // (tp 1, cp 0, dp 1).
  Topology c(16, 2, 1, 2);
  EXPECT_EQ(c.ep_group_of(5, 2), (std::vector<int>{1, 5}));
  EXPECT_EQ(c.expert_dp_group_of(5, 2), (std::vector<int>{5, 7, 13, 15}));
}

TEST(Topology, EveryAxisPartitionsTheWorld) {
  for (int world : {1, 2, 4, 6, 8, 12, 16}) {
    for (int tp = 1; tp <= world; ++tp) {
      for (int pp = 1; pp * tp <= world; ++pp) {
        if (world % (tp * pp) != 0) continue;
        Topology t(world, tp, pp);
        for (const auto& groups : {t.tp_groups(), t.dp_groups(), t.pp_groups()}) {
          std::multiset<int> all;
          for (const auto& g : groups) {
            EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
            all.insert(g.begin(), g.end());
          }
          EXPECT_EQ(all.size(), static_cast<size_t>(world)) << t.describe();
          EXPECT_EQ(std::set<int>(all.begin(), all.end()).size(), static_cast<size_t>(world));
        }
        EXPECT_EQ(t.tp_groups().size(), static_cast<size_t>(world / tp));
        EXPECT_EQ(t.pp_groups().size(), static_cast<size_t>(world / pp));
        for (const auto& g : t.embedding_groups()) EXPECT_EQ(g.size(), pp == 1 ? 1u : 2u);
        // tp neighbours are consecutive ranks.
        for (const auto& g : t.tp_groups()) EXPECT_EQ(g.back() - g.front(), tp - 1);
      }
    }
  }
}

TEST(Topology, LayoutsThatDoNotDivideTheWorldAreErrors) {
  try {
    Topology t(6, 4, 1);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor_model_parallel_size 4 x pipeline_model_parallel_size 1 = 4 does not divide the world size 6"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Topology(4, 0, 1), ConfigError);
  EXPECT_THROW(Topology(4, 1, 3), ConfigError);
  EXPECT_THROW(Topology(4, 2, 2).coord(4), ConfigError);
}

}  // namespace
}  // namespace tessera::parallel
