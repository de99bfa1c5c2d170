// The embedding sharding planner as pure logic: which sharding each table gets
// from the memory budget, balance of table-wise tables by bytes, the printed
// plan, forced shardings and the errors.
#include <gtest/gtest.h>

#include <iostream>

#include "tessera/core/error.h"
#include "tessera/parallel/embedding/sharding_planner.h"

namespace tessera::parallel {
namespace {

constexpr int64_t kMiB = 1 << 20;

TEST(EmbeddingPlanner, PicksEachShardingFromTheBudget) {
  // bytes = rows * (dim + 1) * 4
  const std::vector<EmbeddingTableConfig> tables = {
      {"huge", 1000000, 31},   // 128 MB: fits no rank, dim too small to split -> row-wise
      {"wide", 65536, 511},    // 128 MB: fits no rank, 2 x 256 columns fit -> column-wise
      {"t8", 65536, 31},       // 8 MiB
      {"t6", 49152, 31},       // 6 MiB
      {"t4", 32768, 31},       // 4 MiB
      {"t2", 16384, 31},       // 2 MiB
      {"tiny", 100, 15}};      // 6.4 KB -> data-parallel
  PlannerOptions o;
  o.world = 4;
  o.budget_bytes_per_rank = 100 * kMiB;
  const ShardingPlan plan = plan_sharding(tables, o);
  const std::string text = plan.to_string();
  std::cout << text;
  EXPECT_EQ(plan.tables[0].type, ShardingType::kRowWise);
  EXPECT_EQ(plan.tables[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(plan.tables[0].offsets, (std::vector<int64_t>{0, 250000, 500000, 750000, 1000000}));
  EXPECT_EQ(plan.tables[1].type, ShardingType::kColumnWise);
  EXPECT_EQ(plan.tables[1].ranks.size(), 2u);
  EXPECT_EQ(plan.tables[1].offsets, (std::vector<int64_t>{0, 256, 511}));
  EXPECT_EQ(plan.tables[6].type, ShardingType::kDataParallel);
  EXPECT_EQ(plan.tables[6].bytes, (std::vector<int64_t>(4, 100 * 16 * 4)));
  for (size_t t = 2; t < 6; ++t) EXPECT_EQ(plan.tables[t].type, ShardingType::kTableWise);
  // The column-wise table went first (largest) onto ranks 0 and 1, the row-wise
  // one took a quarter everywhere; the table-wise ones, largest first, each go to
  // the rank with the most bytes left: 8 -> 2, 6 -> 3, 4 -> 3, 2 -> 2.
  EXPECT_EQ(plan.tables[1].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan.tables[2].ranks, std::vector<int>{2});
  EXPECT_EQ(plan.tables[3].ranks, std::vector<int>{3});
  EXPECT_EQ(plan.tables[4].ranks, std::vector<int>{3});
  EXPECT_EQ(plan.tables[5].ranks, std::vector<int>{2});
  for (int64_t b : plan.bytes_per_rank()) EXPECT_LE(b, o.budget_bytes_per_rank);
  // The printed table: a header, one line per table with its numbers, the totals.
  EXPECT_NE(text.find("table"), std::string::npos);
  EXPECT_NE(text.find("bytes per rank"), std::string::npos);
  EXPECT_NE(text.find("huge"), std::string::npos);
  EXPECT_NE(text.find("1000000"), std::string::npos);
  EXPECT_NE(text.find("row_wise"), std::string::npos);
  EXPECT_NE(text.find("column_wise"), std::string::npos);
  EXPECT_NE(text.find("data_parallel"), std::string::npos);
  EXPECT_NE(text.find(std::to_string(250000 * 32 * 4)), std::string::npos);
  EXPECT_NE(text.find("total bytes per rank"), std::string::npos);
}

TEST(EmbeddingPlanner, TableWiseBalancesBytesOverTwoRanks) {
  const std::vector<EmbeddingTableConfig> tables = {
      {"a", 16384, 31}, {"b", 8192, 31}, {"c", 24576, 31}, {"d", 16384, 31}};  // 2,1,3,2 MiB
  PlannerOptions o;
  o.world = 2;
  o.budget_bytes_per_rank = 10 * kMiB;
  const ShardingPlan plan = plan_sharding(tables, o);
  // Largest first onto the emptier rank: c->0, a->1, d->1, b->0: 4 MiB each.
  EXPECT_EQ(plan.bytes_per_rank(), (std::vector<int64_t>{4 * kMiB, 4 * kMiB})) << plan.to_string();
  EXPECT_EQ(plan.tables[2].ranks, std::vector<int>{0});
  EXPECT_EQ(plan.tables[0].ranks, std::vector<int>{1});
}

TEST(EmbeddingPlanner, ConstraintsAndShardBounds) {
  PlannerOptions o;
  o.world = 4;
  o.constraints = {{"x", ShardingType::kColumnWise}, {"y", ShardingType::kRowWise}};
  const ShardingPlan plan = plan_sharding({{"x", 10, 5}, {"y", 10, 3}}, o);
  EXPECT_EQ(plan.tables[0].offsets, (std::vector<int64_t>{0, 2, 3, 4, 5}));
  EXPECT_EQ(plan.tables[1].offsets, (std::vector<int64_t>{0, 3, 6, 8, 10}));
  int64_t r0, r1, c0, c1;
  ASSERT_TRUE(plan.tables[1].shard_of(2, &r0, &r1, &c0, &c1));
  EXPECT_EQ(std::vector<int64_t>({r0, r1, c0, c1}), std::vector<int64_t>({6, 8, 0, 3}));
  ASSERT_TRUE(plan.tables[0].shard_of(0, &r0, &r1, &c0, &c1));
  EXPECT_EQ(std::vector<int64_t>({r0, r1, c0, c1}), std::vector<int64_t>({0, 10, 0, 2}));
  EXPECT_EQ(parse_sharding_type("row_wise"), ShardingType::kRowWise);
  EXPECT_THROW(parse_sharding_type("diagonal"), ConfigError);
}

TEST(EmbeddingPlanner, TooBigForTheWorldIsAConfigError) {
  PlannerOptions o;
  o.world = 2;
  o.budget_bytes_per_rank = kMiB;
  try {
    plan_sharding({{"enormous", 1000000, 15}}, o);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("enormous"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::parallel
