#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/models/mlp.h"

namespace tessera::models {
namespace {

TEST(MLP, ShapeDeterminismAndLearning) {
  MLPConfig c;
  MLP a(c), b(c);
  auto x = torch::randn({8, c.in_features});
  auto y = a->forward(x);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{8, c.out_features}));
  EXPECT_TRUE(torch::equal(y, b->forward(x)));
  EXPECT_EQ(a->parameters().size(), 2u * (c.n_hidden_layers + 1));
  auto target = torch::randn({8, c.out_features});
  torch::optim::SGD opt(a->parameters(), 0.05);
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    opt.zero_grad();
    auto loss = torch::mse_loss(a->forward(x), target);
    loss.backward();
    opt.step();
    (i == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first);
  c.n_hidden_layers = 0;
  EXPECT_THROW(MLP{c}, ConfigError);
}

}  // namespace
}  // namespace tessera::models
