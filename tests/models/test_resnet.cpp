// The ResNet of models/resnet.h: shapes, deterministic weights, a training step
// that lowers the loss, and every BatchNorm where convert_sync_batchnorm finds it.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "tessera/core/error.h"
#include "tessera/models/resnet.h"

namespace tessera::models {
namespace {

TEST(ResNet, ShapesSeedsAndALearningStep) {
  ResNetConfig c;
  ResNet a(c), b(c);
  auto x = torch::rand({6, 1, 8, 8});
  auto y = torch::tensor({0, 1, 2, 3, 4, 5}, torch::kLong);
  EXPECT_EQ(a->forward(x).sizes(), (std::vector<int64_t>{6, 10}));
  for (size_t i = 0; i < a->parameters().size(); ++i) {
    EXPECT_TRUE(torch::equal(a->parameters()[i], b->parameters()[i])) << "same seed, other weights";
  }
  c.seed = 7;
  EXPECT_FALSE(torch::equal(ResNet(c)->fc->weight, a->fc->weight));
  // Every BatchNorm2d lives in a Sequential: stem 1, two per block, one per widening shortcut.
  int batch_norms = 0;
  for (const auto& m : a->modules(false)) batch_norms += m->as<torch::nn::BatchNorm2d>() != nullptr;
  EXPECT_EQ(batch_norms, 1 + 3 * 2 + 2);
  torch::optim::SGD sgd(a->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const double first = a->loss(x, y).item<double>();
  for (int i = 0; i < 20; ++i) {
    sgd.zero_grad();
    a->loss(x, y).backward();
    sgd.step();
  }
  EXPECT_LT(a->loss(x, y).item<double>(), 0.5 * first);
  ResNetConfig bad;
  bad.widths = {};
  EXPECT_THROW(ResNet{bad}, Error);
}

}  // namespace
}  // namespace tessera::models
