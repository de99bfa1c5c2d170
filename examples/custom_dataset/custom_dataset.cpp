// Your own dataset with DistributedSampler: each rank reads a disjoint shard every
// epoch, set_epoch reshuffles, and a resumed sampler continues where it stopped.
// Run: tessera run -n 2 ./custom_dataset
// Checks: per epoch, the shards of all ranks together cover every example once
// (plus the documented wrap-around padding); epochs differ; resume is exact.
#include <tessera/tessera.h>
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <set>

// A dataset is anything you can index: here 103 (x, y) pairs made on the fly.
struct SquaresDataset {
  int64_t size() const { return 103; }
  std::pair<at::Tensor, at::Tensor> get(int64_t i) const {
    return {at::full({1}, double(i)), at::full({1}, double(i * i))};
  }
};

int main() {
  tessera::init();
  auto group = tessera::default_group();
  const int rank = group->rank(), world = group->size();
  SquaresDataset dataset;
  tessera::data::DistributedSamplerOptions options;
  options.shuffle = true;
  options.seed = 42;
  tessera::data::DistributedSampler sampler(dataset.size(), world, rank, options);
  bool ok = true;
  std::vector<int64_t> previous_epoch;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    sampler.set_epoch(epoch);  // a new permutation, the same on every rank
    std::vector<int64_t> seen;
    for (auto batch = sampler.next_batch(8); !batch.empty(); batch = sampler.next_batch(8)) {
      for (int64_t i : batch) {
        auto [x, y] = dataset.get(i);
        ok = ok && y.item<double>() == x.item<double>() * x.item<double>();
        seen.push_back(i);
      }
    }
    ok = ok && seen != previous_epoch;
    previous_epoch = seen;
    // Gather every rank's indices (all ranks read the same count).
    auto mine = at::tensor(seen, at::kLong);
    std::vector<at::Tensor> all(world);
    for (auto& t : all) t = at::empty_like(mine);
    group->all_gather(all, mine)->wait();
    std::multiset<int64_t> every;
    for (auto& t : all) every.insert(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    const int64_t padding = sampler.total_size() - dataset.size();
    std::set<int64_t> distinct(every.begin(), every.end());
    ok = ok && static_cast<int64_t>(distinct.size()) == dataset.size() &&
         static_cast<int64_t>(every.size()) == dataset.size() + padding;
  }
  // Resume mid-epoch from a saved state (what a checkpoint stores per rank).
  sampler.set_epoch(5);
  sampler.next_batch(8);
  const auto saved = tessera::data::SamplerState::from_json(sampler.state().to_json());
  const auto expected = sampler.next_batch(8);
  tessera::data::DistributedSampler resumed(dataset.size(), world, rank, options);
  resumed.load_state(saved);
  ok = ok && resumed.next_batch(8) == expected;

  std::printf("rank %d: %lld samples per epoch: %s\n", rank,
              static_cast<long long>(sampler.num_samples()), ok ? "shards check out" : "WRONG");
  auto all_ok = at::full({1}, ok ? 1.0 : 0.0);
  group->all_reduce(all_ok, tessera::comm::ReduceOp::kMin)->wait();
  if (rank == 0 && all_ok.item<double>() == 1.0) {
    std::printf("OK DistributedSampler shards a user dataset across %d ranks\n", world);
  }
  tessera::shutdown();
  return ok ? 0 : 1;
}
