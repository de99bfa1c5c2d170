// DDP error paths and unused parameters: replicas that differ, a parameter that
// gets no gradient (error without find_unused_parameters, zero gradient with it),
// buffers broadcast from rank 0.
#include <gtest/gtest.h>

#include "ddp_test_util.h"
#include "tessera/core/error.h"
#include "tessera/runtime/ddp/distributed_data_parallel.h"
#include "testing/thread_ranks.h"

namespace tessera::runtime::ddp {
namespace {

using tessera::testing::data_for;

// Two heads; forward(x, use_b) uses head b only when asked.
struct TwoHeadsImpl : torch::nn::Module {
  TwoHeadsImpl()
      : body(register_module("body", torch::nn::Linear(4, 8))),
        head_a(register_module("head_a", torch::nn::Linear(8, 2))),
        head_b(register_module("head_b", torch::nn::Linear(8, 2))) {
    register_buffer("stat", torch::zeros({3}));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_b) {
    auto h = torch::relu(body(x));
    return use_b ? head_a(h) + head_b(h) : head_a(h);
  }
  torch::nn::Linear body, head_a, head_b;
};
TORCH_MODULE(TwoHeads);


TEST(DdpErrors, ReplicasThatDifferNameTheFirstDifference) {
  std::vector<std::string> messages(2);
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 10);
    auto model = torch::nn::Linear(4, rank == 0 ? 3 : 5);
    try {
      DistributedDataParallel ddp(model.ptr(), group);
    } catch (const ConfigError& e) {
      messages[rank] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(messages[r].find("differs between ranks"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("parameter weight [3, 4]"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("parameter weight [5, 4] Float' on rank 1"), std::string::npos)
        << messages[r];
  }
}

TEST(DdpErrors, UnusedParameterWithoutFindUnusedIsNamed) {
  std::vector<std::string> messages(2);
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 10);
    TwoHeads model;
    DistributedDataParallel ddp(model.ptr(), group);
    try {
      model->forward(data_for(0, 4, 4, rank), false).sum().backward();
    } catch (const ConfigError& e) {
      messages[rank] = e.what();
    }
    // The reducer recovers: a pass that uses everything works afterwards.
    model->forward(data_for(1, 4, 4, rank), true).sum().backward();
    EXPECT_EQ(ddp.reducer().reductions(), 1);
  });
  for (const auto& m : messages) {
    EXPECT_NE(m.find("parameter 'head_b."), std::string::npos) << m;
    EXPECT_NE(m.find("find_unused_parameters"), std::string::npos) << m;
  }
}

TEST(DdpErrors, FindUnusedParametersGivesZeroGradients) {
  // Rank 0 uses head_b, rank 1 does not: head_b's gradient is rank 0's / 2.
  std::vector<torch::Tensor> grads(2);
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 10);
    TwoHeads model;
    DdpOptions opts;
    opts.find_unused_parameters = true;
    DistributedDataParallel ddp(model.ptr(), group, opts);
    auto loss = model->forward(torch::ones({2, 4}), rank == 0).sum();
    ddp.prepare_for_backward(loss);
    loss.backward();
    grads[rank] = model->head_b->bias.grad().clone();
    // Without prepare_for_backward the end of backward marks it instead.
    model->zero_grad();
    model->forward(torch::ones({2, 4}), rank == 0).sum().backward();
    EXPECT_TRUE(model->head_b->bias.grad().equal(grads[rank]));
  });
  EXPECT_TRUE(grads[0].equal(grads[1]));
  // d(sum)/d(bias) = batch 2 on rank 0, 0 on rank 1: average 1.
  EXPECT_TRUE(grads[0].equal(torch::ones({2}))) << grads[0];
}

TEST(DdpErrors, BuffersAndParametersComeFromRankZero) {
  std::vector<torch::Tensor> stats(2), weights(2);
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 10);
    TwoHeads model;
    model->named_buffers()["stat"].fill_(rank + 1.0);
    DistributedDataParallel ddp(model.ptr(), group);
    stats[rank] = model->named_buffers()["stat"].clone();
    weights[rank] = model->body->weight.detach().clone();
    model->named_buffers()["stat"].fill_(rank + 5.0);
    ddp.sync_buffers();
    EXPECT_TRUE(model->named_buffers()["stat"].equal(torch::full({3}, 5.0)));
  });
  EXPECT_TRUE(stats[1].equal(torch::full({3}, 1.0)));
  EXPECT_TRUE(weights[0].equal(weights[1]));
}

}  // namespace
}  // namespace tessera::runtime::ddp
