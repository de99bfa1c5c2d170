// TrainData: the datasets and sampler `tessera train` reads, and the batching
// rules: the training split is cut into non-overlapping blocks of block_size + 1
// tokens, a DistributedSampler deals them to ranks epoch after epoch, and
// evaluation reads fixed, rank-disjoint blocks of the held-out split so every
// evaluation of a run sees the same tokens.
//
// Not thread-safe; one per rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <utility>

#include "tessera/cli/commands/train_settings.h"
#include "tessera/data/distributed_sampler.h"
#include "tessera/data/token_dataset.h"

namespace tessera::cli {

class TrainData {
 public:
  // ConfigError naming the path if data is missing or too small for one block.
  TrainData(const TrainSettings& s, int world, int rank, uint64_t seed);

  // Next micro-batch [batch, block_size] of (inputs, targets); starts a new
  // epoch when the current one runs out.
  std::pair<at::Tensor, at::Tensor> next_batch(int64_t batch);
  // Evaluation batch number `i` (deterministic, different per rank); undefined
  // tensors when there is no held-out data.
  std::pair<at::Tensor, at::Tensor> eval_batch(int64_t i, int64_t batch);
  bool has_val() const { return val_ != nullptr; }

  data::DistributedSampler& sampler() { return *sampler_; }
  const data::TokenDataset& train() const { return *train_; }

 private:
  int64_t block_;
  int world_;
  int rank_;
  std::unique_ptr<data::TokenDataset> train_;
  std::unique_ptr<data::TokenDataset> val_;
  std::unique_ptr<data::DistributedSampler> sampler_;
};

}  // namespace tessera::cli
