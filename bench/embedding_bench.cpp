// Throughput of sharded embedding tables: lookups per second of forward (id
// exchange, pooling, pooled exchange), backward (gradient exchange) and the
// row-wise Adagrad update, run in every worker:
//   tessera run -n 2 embedding_bench SHARDING [STEPS TABLES ROWS DIM BATCH]
// SHARDING is row_wise or table_wise (every table the same way). Prints one line
// from rank 0: "lookups_per_s <x> median_step_ms <y>" over STEPS timed steps.
//
// The same tables, ids and update as bench/embedding_peer.py: ids are drawn with
// LibTorch's generator seeded per (step, rank, table), exactly as the peer draws
// them with PyTorch's, 1-2 ids per sample with log-uniform popularity; the output
// gradient is a constant (no model: the embedding path alone is measured). One
// intra-op thread per rank.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/comm/init.h"
#include "tessera/parallel/embedding/sharded_embedding_bag_collection.h"

namespace {

using namespace tessera::parallel;

// The ids of one table for one step of one rank (the peer repeats these ops).
JaggedIds draw_ids(int64_t rows, int64_t batch, int step, int rank, int table) {
  const auto seed = static_cast<uint64_t>(step * 1000 + rank * 100 + table);
  auto gen = at::detail::createCPUGenerator(seed);
  at::Tensor lengths = at::randint(1, 3, {batch}, gen, at::kLong);
  const int64_t total = lengths.sum().item<int64_t>();
  at::Tensor u = at::rand({total}, gen, at::kDouble);
  at::Tensor ids = (at::exp(u * std::log(static_cast<double>(rows) + 1)) - 1)
                       .floor().to(at::kLong).clamp(0, rows - 1);
  return {lengths, ids};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string sharding = argc > 1 ? argv[1] : "row_wise";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  const int n_tables = argc > 3 ? std::atoi(argv[3]) : 8;
  const int64_t rows = argc > 4 ? std::atoll(argv[4]) : 100000;
  const int64_t dim = argc > 5 ? std::atoll(argv[5]) : 64;
  const int64_t batch = argc > 6 ? std::atoll(argv[6]) : 2048;
  const int warmup = 3;
  at::set_num_threads(1);
  tessera::init();
  auto group = tessera::default_group();
  std::vector<EmbeddingTableConfig> tables;
  PlannerOptions planner;
  planner.world = group->size();
  for (int t = 0; t < n_tables; ++t) {
    tables.push_back({"t" + std::to_string(t), rows, dim});
    planner.constraints[tables.back().name] = parse_sharding_type(sharding);
  }
  ShardedEmbeddingBagCollection ebc(tables, plan_sharding(tables, planner), group, 1,
                                    {0.01, 1e-8});
  const std::vector<at::Tensor> grads(tables.size(), at::full({batch, dim}, 0.01f));
  // Ids drawn before timing: data loading is not measured, on either side.
  std::vector<std::vector<JaggedIds>> ids(static_cast<size_t>(warmup + steps));
  int64_t lookups = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    for (int t = 0; t < n_tables; ++t) {
      ids[s].push_back(draw_ids(rows, batch, s, group->rank(), t));
      if (s >= warmup) lookups += ids[s].back().values.numel();
    }
  }
  std::vector<double> ms;
  for (int s = 0; s < warmup + steps; ++s) {
    group->barrier()->wait();
    const auto t0 = std::chrono::steady_clock::now();
    ebc.forward(ids[static_cast<size_t>(s)]);
    ebc.apply_gradients(grads);
    const auto t1 = std::chrono::steady_clock::now();
    if (s >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  double sum_ms = 0;
  for (double m : ms) sum_ms += m;
  auto slowest_ms = at::full({1}, sum_ms, at::kDouble);
  group->all_reduce(slowest_ms, tessera::comm::ReduceOp::kMax)->wait();
  auto all_lookups = at::full({1}, static_cast<double>(lookups), at::kDouble);
  group->all_reduce(all_lookups)->wait();
  std::sort(ms.begin(), ms.end());
  if (group->rank() == 0) {
    const double seconds = slowest_ms.item<double>() / 1000.0;
    std::printf("lookups_per_s %.0f median_step_ms %.3f\n", all_lookups.item<double>() / seconds,
                ms[ms.size() / 2]);
  }
  tessera::shutdown();
  return 0;
}
