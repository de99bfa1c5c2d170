// SyncBatchNorm: batch normalization whose batch statistics are those of the
// whole data-parallel batch, not of each rank's part (torch.nn.SyncBatchNorm).
//
//   auto model = MyResNet(...);                       // with torch::nn::BatchNorm2d
//   tessera::nn::convert_sync_batchnorm(*model, group);  // every BN in a Sequential
//   auto engine = tessera::initialize(model, config, group);
//
// Training forward: each rank sums its part of the batch per channel (sum, sum
// of squares, element count; in float64) and one all_reduce of 2C + 1 numbers
// gives the global mean and biased variance that normalize every rank's part.
// Backward all-reduces the two per-channel sums the input gradient needs (sum of
// dy, sum of dy * (x - mean)); the weight and bias gradients stay local, for DDP
// to average like any other gradient. The running statistics (unbiased variance,
// as BatchNorm keeps) are updated from the global ones, so they are equal on
// every rank without a broadcast. Ranks may hold different batch sizes: the
// counts make the statistics exact. In eval mode it is plain batch norm on the
// running statistics, with no communication (without track_running_stats it
// normalizes with the global batch statistics in eval mode too, as BatchNorm
// does with its own).
//
// With gradient accumulation each micro-batch is normalized with the statistics
// of that micro-batch across ranks, as BatchNorm normalizes each micro-batch on
// its own: not those of the whole accumulated batch (docs/training-modes.md).
//
// Every training forward and backward is a collective over the group: all ranks
// run the same layers in the same order (DDP's contract). The group must outlive
// the graphs built through the layer. Parameter and buffer names are
// BatchNorm's (weight, bias, running_mean, running_var, num_batches_tracked), so
// checkpoints load either way.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>

#include "tessera/comm/process_group.h"

namespace tessera::parallel {

struct SyncBatchNormOptions {
  int64_t num_features = 0;
  double eps = 1e-5;
  // Running-average factor; nullopt: a cumulative average (BatchNorm's momentum=None).
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

class SyncBatchNormImpl : public torch::nn::Module {
 public:
  SyncBatchNormImpl(SyncBatchNormOptions options, std::shared_ptr<comm::ProcessGroup> group);

  // x: [N, C, ...] (any number of trailing dimensions).
  torch::Tensor forward(const torch::Tensor& x);

  const SyncBatchNormOptions& options() const { return options_; }
  comm::ProcessGroup& group() { return *group_; }

  torch::Tensor weight, bias;                                  // [C], when affine
  torch::Tensor running_mean, running_var, num_batches_tracked;  // when tracking

 private:
  SyncBatchNormOptions options_;
  std::shared_ptr<comm::ProcessGroup> group_;
};
TORCH_MODULE(SyncBatchNorm);

// Replaces every torch::nn::BatchNorm1d/2d/3d inside a torch::nn::Sequential of
// `module` (recursively) by a SyncBatchNorm over `group` with the same options,
// parameters and buffers; returns how many it replaced. LibTorch modules call
// their typed members directly, so a BatchNorm held by its parent as a member
// cannot be rerouted: ConfigError naming it (hold it in a Sequential, or build
// the model with SyncBatchNorm).
int convert_sync_batchnorm(torch::nn::Module& module, std::shared_ptr<comm::ProcessGroup> group);

}  // namespace tessera::parallel

namespace tessera::nn {
using parallel::convert_sync_batchnorm;
using parallel::SyncBatchNorm;
using parallel::SyncBatchNormImpl;
using parallel::SyncBatchNormOptions;
}  // namespace tessera::nn
