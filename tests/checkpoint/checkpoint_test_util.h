// Helpers shared by the checkpoint tests: a temp directory and state builders.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/checkpoint_writer.h"
#include "testing/files.h"

namespace tessera::checkpoint::test {

using TempDir = tessera::testing::TempDir;

// Deterministic state for (step, rank): values differ per step and per rank.
inline CheckpointState make_state(int64_t step, int rank) {
  CheckpointState s;
  s.replicated = {{"w", at::arange(12, at::kFloat).reshape({3, 4}) + static_cast<double>(step)},
                  {"ids", at::arange(5, at::kLong) * step},
                  {"half", at::full({2, 2}, 0.5 * static_cast<double>(step), at::kBFloat16)},
                  {"mask", at::arange(4, at::kInt).remainder(2).to(at::kBool)},
                  {"empty", at::empty({0, 3}, at::kFloat)},
                  {"scalar", at::scalar_tensor(static_cast<double>(step), at::kDouble)}};
  s.per_rank = {{"rng", at::full({16}, rank + 10 * static_cast<int>(step), at::kByte)},
                {"shard", at::full({3}, static_cast<double>(rank) + 0.25, at::kFloat)}};
  s.metadata = {{"step", step}, {"config", {{"lr", 0.1}}}};
  s.rank_metadata = {{"sampler", {{"epoch", 1}, {"position", rank * 3 + step}}}};
  return s;
}

inline void expect_equal(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.scalar_type(), b[i].second.scalar_type()) << a[i].first;
    EXPECT_EQ(a[i].second.sizes(), b[i].second.sizes()) << a[i].first;
    EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

// Loads `sdir` and checks it holds exactly make_state(step, r) for every rank.
inline void expect_checkpoint(const std::string& sdir, int64_t step, int world) {
  auto reader = CheckpointReader::open(sdir);
  EXPECT_EQ(reader.step(), step);
  EXPECT_EQ(reader.world_size(), world);
  expect_equal(reader.replicated(), make_state(step, 0).replicated);
  for (int r = 0; r < world; ++r) {
    expect_equal(reader.per_rank(r), make_state(step, r).per_rank);
    EXPECT_EQ(reader.rank_metadata(r), make_state(step, r).rank_metadata);
  }
  EXPECT_EQ(reader.metadata(), make_state(step, 0).metadata);
}

}  // namespace tessera::checkpoint::test
