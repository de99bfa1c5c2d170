// Exact AUC against hand-computed cases (ties, perfect and inverted orders,
// errors), and the generated click dataset: deterministic from its seed, power-law
// id popularity, and labels that follow its hidden model.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "tessera/core/error.h"
#include "tessera/data/auc.h"
#include "tessera/data/click_dataset.h"

namespace tessera::data {
namespace {

at::Tensor f(std::vector<float> v) { return at::tensor(v, at::kFloat); }

TEST(RocAuc, HandComputedCases) {
  // Positives score 0.8 and 0.4, negatives 0.6 and 0.2: of the 4 (pos, neg)
  // pairs, 3 are ordered right -> 0.75.
  EXPECT_DOUBLE_EQ(roc_auc(f({0.8f, 0.6f, 0.4f, 0.2f}), f({1, 0, 1, 0})), 0.75);
  EXPECT_DOUBLE_EQ(roc_auc(f({0.1f, 0.2f, 0.3f}), f({0, 0, 1})), 1.0);
  EXPECT_DOUBLE_EQ(roc_auc(f({0.1f, 0.2f, 0.3f}), f({1, 1, 0})), 0.0);
  // Ties count one half: positives {0.5, 0.9}, negatives {0.5, 0.1}:
  // (0.5 vs 0.5) = 1/2, (0.5 vs 0.1) = 1, (0.9 vs both) = 2 -> 3.5 / 4.
  EXPECT_DOUBLE_EQ(roc_auc(f({0.5f, 0.5f, 0.9f, 0.1f}), f({1, 0, 1, 0})), 0.875);
  // Every score equal: 0.5 whatever the labels.
  EXPECT_DOUBLE_EQ(roc_auc(f({2, 2, 2, 2, 2}), f({1, 0, 0, 1, 0})), 0.5);
  // Three-way tie across classes: pos {1, 1, 3}, neg {1, 0}:
  // pos 1 vs neg 1 = 1/2 (x2), pos 1 vs 0 = 1 (x2), pos 3 vs both = 2 -> 5 / 6.
  EXPECT_DOUBLE_EQ(roc_auc(f({1, 1, 3, 1, 0}), f({1, 1, 1, 0, 0})), 5.0 / 6.0);
}

TEST(RocAuc, MatchesPairCountingOnRandomScoresWithTies) {
  auto gen = at::detail::createCPUGenerator(5);
  const at::Tensor s = at::randint(0, 20, {300}, gen, at::kLong).to(at::kFloat);
  const at::Tensor y = at::randint(0, 2, {300}, gen, at::kLong).to(at::kFloat);
  double wins = 0, pairs = 0;
  for (int64_t i = 0; i < 300; ++i) {
    for (int64_t j = 0; j < 300; ++j) {
      if (y[i].item<float>() != 1 || y[j].item<float>() != 0) continue;
      const float a = s[i].item<float>(), b = s[j].item<float>();
      wins += a > b ? 1.0 : a == b ? 0.5 : 0.0;
      pairs += 1;
    }
  }
  EXPECT_NEAR(roc_auc(s, y), wins / pairs, 1e-12);
}

TEST(RocAuc, Errors) {
  EXPECT_THROW(roc_auc(f({0.1f, 0.2f}), f({1, 1})), ConfigError);
  EXPECT_THROW(roc_auc(f({0.1f, 0.2f}), f({1, 2})), ConfigError);
  EXPECT_THROW(roc_auc(f({0.1f, 0.2f}), f({1})), ConfigError);
}

TEST(ClickDataset, DeterministicSkewedAndFollowsItsHiddenModel) {
  ClickDatasetOptions o;
  o.samples = 20000;
  o.cardinalities = {5000, 100};
  o.signal_features = 1;
  const ClickDataset a = ClickDataset::generate(o), b = ClickDataset::generate(o);
  const ClickBatch x = a.batch(100, 200), y = b.batch(100, 200);
  EXPECT_TRUE(at::equal(x.dense, y.dense));
  EXPECT_TRUE(at::equal(x.ids[0], y.ids[0]));
  EXPECT_TRUE(at::equal(x.labels, y.labels));
  EXPECT_EQ(x.lengths[0].sum().item<int64_t>(), x.ids[0].numel());
  EXPECT_GE(x.ids[0].min().item<int64_t>(), 0);
  EXPECT_LT(x.ids[0].max().item<int64_t>(), 5000);
  o.seed = 99;
  EXPECT_FALSE(at::equal(ClickDataset::generate(o).batch(100, 200).dense, x.dense));
  // Power law: the most frequent id of 5000 takes several percent of the draws.
  const ClickBatch all = a.batch(0, a.size());
  const at::Tensor counts = at::bincount(all.ids[0], {}, 5000);
  EXPECT_GT(counts.max().item<int64_t>(), all.ids[0].numel() / 20);
  // Labels follow the hidden probabilities: their means agree, and ranking by
  // them is well above chance.
  EXPECT_NEAR(a.labels().mean().item<double>(), a.true_probability().mean().item<double>(), 0.02);
  EXPECT_GT(roc_auc(a.true_probability(), a.labels()), 0.75);
}

}  // namespace
}  // namespace tessera::data
