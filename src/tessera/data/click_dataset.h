// ClickDataset: a generated click-through dataset with a known signal, for
// training and testing recommendation models (`tessera train --task dlrm`)
// without downloading Criteo.
//
// Deterministic from the seed: the same options give the same samples on every
// rank and every run. Each sample has `dense_features` standard-normal floats and,
// per sparse feature f, 1..max_ids_per_feature ids in [0, cardinalities[f]) with
// power-law popularity (P(k-th most popular) ~ 1/k), scattered over the rows by a
// fixed bijection so that popular ids are not all in the first rows. The label is
// a Bernoulli draw from sigmoid of a hidden logistic model:
//
//   logit = bias + 0.8 x0 - 0.6 x1 + 0.5 x2 x3 + sum_{f < signal_features} e_f(bag)
//
// where e_f(bag) is the mean over the bag of a per-id effect ~ N(0, id_effect_std)
// (a hash of seed, feature and id, never stored). Features past signal_features
// are noise. true_probability() keeps each sample's sigmoid(logit), so a test can
// compare a model's AUC with the best any model can reach on the same samples.
//
// Immutable after generate(); safe to read from many threads.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace tessera::data {

struct ClickDatasetOptions {
  int64_t samples = 100000;
  int64_t dense_features = 8;
  std::vector<int64_t> cardinalities = {50000, 10000, 2000, 500, 100, 20};
  int64_t max_ids_per_feature = 2;
  int64_t signal_features = 3;
  double id_effect_std = 1.0;
  double bias = -1.0;
  uint64_t seed = 1234;
  void validate() const;  // ConfigError naming the field
};

// Samples [begin, end) of the dataset: dense [n, dense_features] float32, per
// feature the bag lengths [n] and ids (int64), labels [n] float32 (0 or 1).
struct ClickBatch {
  at::Tensor dense;
  std::vector<at::Tensor> lengths;
  std::vector<at::Tensor> ids;
  at::Tensor labels;
};

class ClickDataset {
 public:
  static ClickDataset generate(const ClickDatasetOptions& options);

  int64_t size() const { return labels_.numel(); }
  const ClickDatasetOptions& options() const { return options_; }
  ClickBatch batch(int64_t begin, int64_t end) const;
  const at::Tensor& labels() const { return labels_; }
  const at::Tensor& true_probability() const { return probability_; }

 private:
  ClickDatasetOptions options_;
  at::Tensor dense_;                              // [N, dense_features]
  std::vector<at::Tensor> lengths_, offsets_, ids_;  // per feature; offsets [N + 1]
  at::Tensor labels_, probability_;
};

}  // namespace tessera::data
