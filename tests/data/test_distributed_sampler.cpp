// DistributedSampler: partition, padding, drop_last, shuffling per epoch, and
// resuming from a saved state.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tessera/core/error.h"
#include "tessera/data/distributed_sampler.h"

namespace tessera::data {
namespace {

std::vector<std::vector<int64_t>> shards(int64_t n, int replicas, DistributedSamplerOptions o,
                                         int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler s(n, replicas, r, o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

TEST(DistributedSampler, ShardsCoverTheDatasetAndPadByWrapping) {
  for (int64_t n : {1, 7, 10, 12, 13}) {
    for (int replicas : {1, 2, 3, 4, 5}) {
      for (bool shuffle : {false, true}) {
        DistributedSamplerOptions o;
        o.shuffle = shuffle;
        o.seed = 7;
        auto sh = shards(n, replicas, o);
        const int64_t per_rank = (n + replicas - 1) / replicas;
        std::multiset<int64_t> all;
        for (const auto& s : sh) {
          EXPECT_EQ(static_cast<int64_t>(s.size()), per_rank);
          all.insert(s.begin(), s.end());
        }
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_GE(all.count(i), 1u) << "index " << i << " missing, n=" << n;
        }
        // Fix from review (the old check compared the total with itself): the
        // extra copies are exactly the padding, wrapped around the epoch's index
        // list, so pad = total - n copies spread over the first min(pad, n)
        // indices of that list, each repeated at most ceil(pad / n) times.
        const int64_t pad = per_rank * replicas - n;
        int64_t extra = 0, repeated = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t c = static_cast<int64_t>(all.count(i));
          extra += c - 1;
          if (c > 1) ++repeated;
          EXPECT_LE(c - 1, (pad + n - 1) / n) << "index " << i << " n=" << n;
          // Unshuffled, the list is 0..n-1: the padding repeats its first indices.
          if (!shuffle) {
            EXPECT_EQ(c > 1, i < std::min(pad, n)) << "index " << i << " n=" << n;
          }
        }
        EXPECT_EQ(extra, pad) << "n=" << n << " replicas=" << replicas;
        EXPECT_EQ(repeated, std::min(pad, n)) << "n=" << n << " replicas=" << replicas;
        if (n % replicas == 0) {
          EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), all.size()) << "overlap";
        }
      }
    }
  }
}

TEST(DistributedSampler, DropLastGivesDisjointEqualShards) {
  DistributedSamplerOptions o;
  o.drop_last = true;
  auto sh = shards(11, 3, o);
  std::set<int64_t> seen;
  for (const auto& s : sh) {
    EXPECT_EQ(s.size(), 3u);
    for (auto i : s) EXPECT_TRUE(seen.insert(i).second) << "index " << i << " on two ranks";
  }
  EXPECT_THROW(DistributedSampler(2, 3, 0, o), ConfigError);
}

TEST(DistributedSampler, UnshuffledIsStrided) {
  DistributedSamplerOptions o;
  o.shuffle = false;
  DistributedSampler s(10, 3, 1, o);
  EXPECT_EQ(s.indices(), (std::vector<int64_t>{1, 4, 7, 0}));  // 10 padded by wrapping to 0..1
}

TEST(DistributedSampler, EpochsReshuffleIdenticallyOnEveryRank) {
  DistributedSamplerOptions o;
  o.seed = 3;
  auto e0 = shards(100, 4, o, 0), e0_again = shards(100, 4, o, 0), e1 = shards(100, 4, o, 1);
  EXPECT_EQ(e0, e0_again);  // every rank derives the same permutation
  EXPECT_NE(e0, e1);
  o.seed = 4;
  EXPECT_NE(shards(100, 4, o, 0), e0);
  // The epoch's shards together are a permutation of the dataset.
  std::vector<int64_t> all;
  for (const auto& s : e1) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(all[static_cast<size_t>(i)], i);
}

TEST(DistributedSampler, ResumesFromSavedState) {
  DistributedSamplerOptions o;
  o.seed = 11;
  DistributedSampler a(50, 2, 1, o);
  a.set_epoch(2);
  a.next_batch(4);
  a.next_batch(4);
  const std::string saved = a.state().to_json();
  auto expected = a.next_batch(100);
  EXPECT_EQ(expected.size(), 17u);  // 25 per rank - 8 consumed
  EXPECT_TRUE(a.next_batch(4).empty());

  DistributedSampler b(50, 2, 1, o);
  b.load_state(SamplerState::from_json(saved));
  EXPECT_EQ(b.epoch(), 2);
  EXPECT_EQ(b.position(), 8);
  EXPECT_EQ(b.next_batch(100), expected);

  SamplerState too_far{2, 26};
  EXPECT_THROW(b.load_state(too_far), ConfigError);
  EXPECT_THROW(SamplerState::from_json("{\"epoch\": 1}"), ConfigError);
  EXPECT_THROW(SamplerState::from_json("not json"), ConfigError);
}

// 4 ranks that each consumed 6 indices of epoch 1 have used the first 24 entries
// of the epoch's permutation; 2 ranks (12 each) and 1 rank (24) continue with
// exactly the entries the 4 ranks would have taken next.
TEST(DistributedSampler, ReshardedStateContinuesWithTheSameSamples) {
  DistributedSamplerOptions o;
  o.seed = 9;
  std::vector<int64_t> next_at_4;
  for (int r = 0; r < 4; ++r) {
    DistributedSampler s(64, 4, r, o);
    s.set_epoch(1);
    s.next_batch(6);
    auto n = s.next_batch(2);
    next_at_4.insert(next_at_4.end(), n.begin(), n.end());
  }
  const SamplerState saved{1, 6};
  for (int world : {1, 2, 8}) {
    std::vector<int64_t> next;
    for (int r = 0; r < world; ++r) {
      DistributedSampler s(64, world, r, o);
      s.load_state(saved.resharded(4, world));
      auto n = s.next_batch(8 / world);
      next.insert(next.end(), n.begin(), n.end());
    }
    std::sort(next.begin(), next.end());
    auto want = next_at_4;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(next, want) << "world " << world;
  }
  EXPECT_EQ(saved.resharded(4, 4), saved);
  try {
    (void)saved.resharded(4, 5);  // 24 entries over 5 ranks
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("does not split evenly over 5 ranks"), std::string::npos)
        << e.what();
  }
}

TEST(DistributedSampler, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(10, 2, 2), ConfigError);
  EXPECT_THROW(DistributedSampler(10, 0, 0), ConfigError);
  EXPECT_THROW(DistributedSampler(-1, 1, 0), ConfigError);
}

}  // namespace
}  // namespace tessera::data
