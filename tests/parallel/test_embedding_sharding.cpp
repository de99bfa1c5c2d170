// Sharded embedding tables against one EmbeddingBagCollection in one process on
// the global batch: for every sharding type at 2 and 4 ranks (ranks as threads
// over gloo), the pooled outputs of each of 10 steps and, after them, the weights
// and row-wise Adagrad accumulators must be equal bit for bit (float32, sum
// pooling, skewed ids with repeats and empty bags). Then a mixed plan from the
// planner, and a table bigger than one rank's budget trained row-wise over 4 ranks.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <ostream>

#include "tessera/parallel/embedding/embedding_bag_collection.h"
#include "tessera/parallel/embedding/sharded_embedding_bag_collection.h"
#include "testing/thread_ranks.h"

namespace tessera::parallel {

// GoogleTest prints parameters through this (found by argument-dependent lookup).
void PrintTo(ShardingType type, std::ostream* os) { *os << to_string(type); }

namespace {

using tessera::testing::make_group;
using tessera::testing::run_ranks;

constexpr int64_t kBatchPerRank = 6;
constexpr int kSteps = 10;

std::vector<EmbeddingTableConfig> small_tables() {
  return {{"user", 50, 8}, {"item", 40, 6}, {"ad", 64, 8}, {"city", 30, 5}};
}

// Global batch of `n` samples for table `t` at `step`: 0-4 ids per sample (empty
// bags included), ids skewed toward low rows so that rows repeat across ranks.
JaggedIds global_ids(const EmbeddingTableConfig& table, int64_t n, int step, size_t t) {
  auto gen = at::detail::createCPUGenerator(1000 * static_cast<uint64_t>(step) + t);
  at::Tensor lengths = at::randint(0, 5, {n}, gen, at::kLong);
  const int64_t total = lengths.sum().item<int64_t>();
  at::Tensor u = at::rand({total}, gen, at::kDouble);
  at::Tensor ids =
      (u.pow(3) * static_cast<double>(table.rows)).to(at::kLong).clamp_max(table.rows - 1);
  return {lengths, ids};
}

// Gradients with few mantissa bits, so that their float64 sums stay exact.
at::Tensor global_grad(const EmbeddingTableConfig& table, int64_t n, int step, size_t t) {
  auto gen = at::detail::createCPUGenerator(777 + 1000 * static_cast<uint64_t>(step) + t);
  return at::randint(-64, 65, {n, table.dim}, gen, at::kLong).to(at::kFloat) / 32;
}

JaggedIds rank_slice(const JaggedIds& global, int rank) {
  const at::Tensor offsets = at::cat({at::zeros({1}, at::kLong), global.lengths.cumsum(0)});
  const int64_t b0 = rank * kBatchPerRank;
  const int64_t v0 = offsets[b0].item<int64_t>(), v1 = offsets[b0 + kBatchPerRank].item<int64_t>();
  return {global.lengths.narrow(0, b0, kBatchPerRank).clone(),
          global.values.narrow(0, v0, v1 - v0).clone()};
}

// Trains the sharded tables and the reference side by side; every rank checks.
void check_equal_to_unsharded(const ShardingPlan& plan, int world) {
  const auto tables = small_tables();
  const RowwiseAdagradOptions opt{0.1, 1e-8};
  run_ranks(world, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    ShardedEmbeddingBagCollection sharded(tables, plan, group, 42, opt);
    EmbeddingBagCollection reference(tables, 42, opt);
    const int64_t n = kBatchPerRank * size;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<JaggedIds> all, mine;
      std::vector<at::Tensor> grads, my_grads;
      for (size_t t = 0; t < tables.size(); ++t) {
        all.push_back(global_ids(tables[t], n, step, t));
        mine.push_back(rank_slice(all.back(), rank));
        grads.push_back(global_grad(tables[t], n, step, t));
        my_grads.push_back(grads.back().narrow(0, rank * kBatchPerRank, kBatchPerRank));
      }
      auto out = sharded.forward(mine);
      auto ref = reference.forward(all);
      for (size_t t = 0; t < tables.size(); ++t) {
        const auto expect = ref[t].detach().narrow(0, rank * kBatchPerRank, kBatchPerRank);
        EXPECT_TRUE(at::equal(out[t].detach(), expect))
            << "table " << tables[t].name << " step " << step << " rank " << rank
            << ": pooled max diff " << (out[t].detach() - expect).abs().max().item<double>();
      }
      sharded.apply_gradients(my_grads);
      reference.apply_gradients(grads);
    }
    for (size_t t = 0; t < tables.size(); ++t) {
      auto [weight, accum] = sharded.gather_table(t);
      EXPECT_TRUE(at::equal(weight, reference.weight(t)))
          << "table " << tables[t].name << " rank " << rank << ": weight max diff "
          << (weight - reference.weight(t)).abs().max().item<double>();
      EXPECT_TRUE(at::equal(accum, reference.accumulator(t)))
          << "table " << tables[t].name << " rank " << rank << ": accumulator max diff "
          << (accum - reference.accumulator(t)).abs().max().item<double>();
      // Training moved the table: equality is not that of two untouched copies.
      EXPECT_GT(reference.accumulator(t).max().item<float>(), 0.0f);
    }
  });
}

ShardingPlan forced_plan(ShardingType type, int world) {
  PlannerOptions o;
  o.world = world;
  for (const auto& t : small_tables()) o.constraints[t.name] = type;
  return plan_sharding(small_tables(), o);
}

class EveryShardingType : public ::testing::TestWithParam<std::tuple<ShardingType, int>> {};

TEST_P(EveryShardingType, EqualsUnshardedTableBitForBit) {
  const auto [type, world] = GetParam();
  const ShardingPlan plan = forced_plan(type, world);
  for (const auto& t : plan.tables) ASSERT_EQ(t.type, type);
  check_equal_to_unsharded(plan, world);
}

INSTANTIATE_TEST_SUITE_P(
    Embedding, EveryShardingType,
    ::testing::Combine(::testing::Values(ShardingType::kDataParallel, ShardingType::kTableWise,
                                         ShardingType::kRowWise, ShardingType::kColumnWise),
                       ::testing::Values(2, 4)),
    [](const auto& info) {
      return std::string(to_string(std::get<0>(info.param))) + "_" +
             std::to_string(std::get<1>(info.param)) + "ranks";
    });

TEST(ShardedEmbedding, MixedPlanEqualsUnsharded) {
  // One table of each kind in the same step: their exchanges share buffers.
  PlannerOptions o;
  o.world = 4;
  o.constraints = {{"user", ShardingType::kRowWise}, {"item", ShardingType::kTableWise},
                   {"ad", ShardingType::kColumnWise}, {"city", ShardingType::kDataParallel}};
  check_equal_to_unsharded(plan_sharding(small_tables(), o), 4);
}

TEST(ShardedEmbedding, TableBiggerThanOneRankTrainsRowWise) {
  const std::vector<EmbeddingTableConfig> tables = {
      {"huge", 200000, 16}, {"medium", 6000, 16}, {"small", 4000, 16}, {"tiny", 100, 4}};
  PlannerOptions o;
  o.world = 4;
  o.budget_bytes_per_rank = 5 << 20;  // the huge table alone is 13.6 MB
  ASSERT_GT(tables[0].bytes(), o.budget_bytes_per_rank);
  const ShardingPlan plan = plan_sharding(tables, o);
  ASSERT_EQ(plan.tables[0].type, ShardingType::kRowWise) << plan.to_string();
  ASSERT_EQ(plan.tables[1].type, ShardingType::kTableWise) << plan.to_string();
  ASSERT_EQ(plan.tables[3].type, ShardingType::kDataParallel) << plan.to_string();
  run_ranks(4, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    ShardedEmbeddingBagCollection ebc(tables, plan, group, 3, {0.5, 1e-8});
    EXPECT_LE(ebc.local_bytes(), o.budget_bytes_per_rank);
    EXPECT_EQ(ebc.local_bytes(), plan.bytes_per_rank()[static_cast<size_t>(rank)]);
    // A fixed batch and a target per sample: squared error of the summed
    // embeddings must fall as the touched rows of every shard learn.
    std::vector<JaggedIds> ids;
    for (size_t t = 0; t < tables.size(); ++t) {
      auto all = global_ids(tables[t], kBatchPerRank * size, 99, t);
      all.values = (all.values * 7919) % tables[t].rows;  // spread over every shard
      ids.push_back(rank_slice(all, rank));
    }
    double first = 0, last = 0;
    for (int step = 0; step < 15; ++step) {
      auto out = ebc.forward(ids);
      at::Tensor loss = at::zeros({}, at::kFloat);
      for (size_t t = 0; t < out.size(); ++t) loss = loss + (out[t] - 0.5).pow(2).sum();
      auto total = loss.detach().reshape({1}).clone();
      group->all_reduce(total)->wait();
      loss.backward();
      ebc.step();
      if (step == 0) first = total.item<double>();
      last = total.item<double>();
    }
    EXPECT_LT(last, 0.5 * first) << "loss " << first << " -> " << last;
  });
}

}  // namespace
}  // namespace tessera::parallel
