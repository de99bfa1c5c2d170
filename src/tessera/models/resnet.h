// ResNet: a small residual network of basic blocks with batch normalization
// (He et al., 2016), the convolutional model of the training-mode comparisons
// and of `tessera train --task digits` (docs/training-modes.md).
//
//   stem    3x3 conv (in_channels -> widths[0]), BatchNorm2d, ReLU
//   stages  per width w in `widths`: blocks_per_stage basic blocks (two 3x3 convs
//           with BatchNorm2d, ReLU, identity shortcut); the first block of every
//           stage after the first halves the resolution (stride 2) and widens the
//           shortcut with a 1x1 conv and BatchNorm2d
//   head    global average pool, Linear to num_classes
//
// Every BatchNorm2d sits in a torch::nn::Sequential, so
// tessera::nn::convert_sync_batchnorm(model, group) turns them all into
// SyncBatchNorm. Weights come from a private generator seeded with config.seed
// (convs: Kaiming normal on fan-out; BatchNorm: weight 1, bias 0; Linear:
// uniform in +-1/sqrt(fan_in)), so every rank builds the same model.
// An ordinary module; not thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace tessera::models {

struct ResNetConfig {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  std::vector<int64_t> widths = {16, 32, 64};
  int64_t blocks_per_stage = 1;
  uint64_t seed = 1234;
  void validate() const;  // ConfigError naming the field
};

class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Sequential body{nullptr};      // conv, BN, ReLU, conv, BN
  torch::nn::Sequential shortcut{nullptr};  // empty, or 1x1 conv and BN
};
TORCH_MODULE(BasicBlock);

class ResNetImpl : public torch::nn::Module {
 public:
  explicit ResNetImpl(const ResNetConfig& config);
  // x [N, in_channels, H, W] -> logits [N, num_classes].
  torch::Tensor forward(const torch::Tensor& x);
  // Mean cross entropy of the logits against labels [N] (int64).
  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& labels);
  const ResNetConfig& config() const { return config_; }
  int64_t num_parameters() const;

  torch::nn::Sequential stem{nullptr};
  torch::nn::Sequential stages{nullptr};  // BasicBlocks
  torch::nn::Linear fc{nullptr};

 private:
  ResNetConfig config_;
};
TORCH_MODULE(ResNet);

}  // namespace tessera::models
