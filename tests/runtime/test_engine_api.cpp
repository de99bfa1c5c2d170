// Engine API: the user's own optimizer (built, or from a factory over parameter
// groups) against the same optimizer in one process on the global batch, exact
// resume of its state, the config's weight-decay groups, and the call-order
// contracts (each misuse is an error that says what to do).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "ddp_test_util.h"
#include "tessera/core/error.h"
#include "tessera/runtime/engine.h"
#include "testing/thread_ranks.h"

namespace tessera::runtime {
namespace {

using tessera::testing::copy_params;
using tessera::testing::data_for;
using tessera::testing::max_abs_diff;
using tessera::testing::Mlp;

constexpr int64_t kIn = 8, kHidden = 16, kOut = 4;

// Two groups: weights (lr 0.02, weight decay 0.1) and biases (lr 0.05, no decay).
std::vector<torch::optim::OptimizerParamGroup> two_groups(torch::nn::Module& m) {
  std::vector<at::Tensor> weights, biases;
  for (auto& p : m.named_parameters(true)) {
    (p.key().find("bias") != std::string::npos ? biases : weights).push_back(p.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(weights, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(0.02).weight_decay(0.1)));
  groups.emplace_back(biases, std::make_unique<torch::optim::AdamWOptions>(
                                  torch::optim::AdamWOptions(0.05).weight_decay(0.0)));
  return groups;
}

std::shared_ptr<torch::optim::AdamW> user_adamw(torch::nn::Module& m) {
  return std::make_shared<torch::optim::AdamW>(two_groups(m), torch::optim::AdamWOptions(1.0));
}

const char* kNoOptimizerConfig = R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
    "gradient_clipping": 1.0})";  // 2 ranks -> accumulation 2

// One optimizer step of the engine: rank r's half of the global batch of 16, as
// two micro-batches of 4.
void engine_step(Engine& engine, Mlp& model, int rank, int64_t s) {
  auto x = data_for(s, 16, kIn, 1).narrow(0, rank * 8, 8);
  auto y = data_for(s, 16, kOut, 2).narrow(0, rank * 8, 8);
  for (int m = 0; m < 2; ++m) {
    engine.backward(torch::mse_loss(model->forward(x.narrow(0, 4 * m, 4)), y.narrow(0, 4 * m, 4)));
    engine.step();
  }
}

TEST(EngineUserOptimizer, TwoGroupsMatchOneProcessAndResumeExactly) {
  const int64_t steps = 12, saved_at = 6;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tessera_user_opt_" + std::to_string(::getpid()));
  torch::manual_seed(11);
  Mlp init(kIn, kHidden, kOut);
  Mlp ref(kIn, kHidden, kOut);
  copy_params(*ref, *init);
  auto ref_opt = user_adamw(*ref);
  for (int64_t s = 0; s < steps; ++s) {
    ref_opt->zero_grad();
    torch::mse_loss(ref->forward(data_for(s, 16, kIn, 1)), data_for(s, 16, kOut, 2)).backward();
    torch::nn::utils::clip_grad_norm_(ref->parameters(), 1.0);
    ref_opt->step();
  }
  std::mutex mu;
  double worst = 0, worst_resumed = 0;
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = tessera::testing::make_group(rank, size, store, "gloo");
    const Config cfg = Config::from_string(kNoOptimizerConfig);
    Mlp model(kIn, kHidden, kOut);
    copy_params(*model, *init);
    auto opt = user_adamw(*model);
    Engine engine = tessera::initialize(model, cfg, opt, group);
    EXPECT_EQ(&engine.optimizer(), opt.get());
    EXPECT_EQ(engine.optimizer_parameters().names.size(), 6u);
    for (int64_t s = 0; s < steps; ++s) {
      engine_step(engine, model, rank, s);
      if (s + 1 == saved_at) engine.save_checkpoint(dir.string());
    }
    // The groups kept their own lr (no scheduler): the engine did not touch them.
    EXPECT_DOUBLE_EQ(opt->param_groups()[0].options().get_lr(), 0.02);
    EXPECT_DOUBLE_EQ(opt->param_groups()[1].options().get_lr(), 0.05);
    // Resume into a fresh model and a fresh user optimizer, through the factory form.
    Mlp fresh(kIn, kHidden, kOut);
    Engine resumed = tessera::initialize(
        fresh, cfg,
        [](std::vector<torch::optim::OptimizerParamGroup> groups) {
          return std::make_unique<torch::optim::AdamW>(std::move(groups),
                                                       torch::optim::AdamWOptions(1.0));
        },
        two_groups(*fresh), group);
    resumed.load_checkpoint(dir.string());
    EXPECT_EQ(resumed.global_steps(), saved_at);
    for (int64_t s = saved_at; s < steps; ++s) engine_step(resumed, fresh, rank, s);
    std::lock_guard<std::mutex> lock(mu);
    worst = std::max(worst, max_abs_diff(*model, *ref));
    worst_resumed = std::max(worst_resumed, max_abs_diff(*fresh, *model));
  });
  std::filesystem::remove_all(dir);
  std::printf("[user optimizer] 2 groups, 2 ranks, accumulation 2: max |diff| vs one process "
              "%.3g; resumed vs straight %.3g\n", worst, worst_resumed);
  EXPECT_LE(worst, 1e-5);
  EXPECT_EQ(worst_resumed, 0.0);
}

// An optimizer whose state Tessera does not know by name (RMSprop) is saved whole
// and restored exactly.
TEST(EngineUserOptimizer, OtherOptimizersResumeThroughTheirOwnArchive) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tessera_rmsprop_" + std::to_string(::getpid()));
  torch::manual_seed(12);
  Mlp init(kIn, kHidden, kOut);
  double diff = -1;
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = tessera::testing::make_group(rank, size, store, "gloo");
    const Config cfg = Config::from_string(kNoOptimizerConfig);
    auto rms = [](torch::nn::Module& m) {
      return std::make_shared<torch::optim::RMSprop>(
          m.parameters(), torch::optim::RMSpropOptions(0.01).momentum(0.5).centered(true));
    };
    Mlp a(kIn, kHidden, kOut), b(kIn, kHidden, kOut);
    copy_params(*a, *init);
    Engine straight = tessera::initialize(a, cfg, rms(*a), group);
    for (int64_t s = 0; s < 8; ++s) {
      engine_step(straight, a, rank, s);
      if (s == 3) straight.save_checkpoint(dir.string());
    }
    Engine resumed = tessera::initialize(b, cfg, rms(*b), group);
    resumed.load_checkpoint(dir.string());
    for (int64_t s = 4; s < 8; ++s) engine_step(resumed, b, rank, s);
    if (rank == 0) diff = max_abs_diff(*a, *b);
    // Another optimizer type cannot take this state.
    Mlp c(kIn, kHidden, kOut);
    Engine other = tessera::initialize(c, cfg, user_adamw(*c), group);
    try {
      other.load_checkpoint(dir.string());
      ADD_FAILURE() << "AdamW loaded RMSprop state";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("holds state of optimizer RMSprop"), std::string::npos)
          << e.what();
    }
  });
  std::filesystem::remove_all(dir);
  EXPECT_EQ(diff, 0.0);
}

TEST(EngineUserOptimizer, ConfigOptimizerAndUserOptimizerTogetherIsAnError) {
  tessera::testing::run_ranks(1, [&](int rank, int size, auto store) {
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 10);
    Mlp model(kIn, kHidden, kOut);
    const Config cfg = Config::from_string(
        R"({"train_batch_size": 4, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})");
    try {
      tessera::initialize(model, cfg, user_adamw(*model), group);
      ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("remove one of them"), std::string::npos) << e.what();
    }
    // An optimizer over tensors that are not the model's is refused by name.
    auto stray = std::make_shared<torch::optim::SGD>(
        std::vector<at::Tensor>{torch::zeros({3}, torch::requires_grad())},
        torch::optim::SGDOptions(0.1));
    try {
      tessera::initialize(model, Config::from_string(R"({"train_batch_size": 4})"), stray, group);
      ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("not a parameter of the model"), std::string::npos);
    }
  });
}

// The config's own parameter groups: the excluded names get weight decay 0.
TEST(EngineUserOptimizer, ConfigWeightDecayExclusions) {
  tessera::testing::run_ranks(1, [&](int rank, int size, auto store) {
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 10);
    Mlp model(kIn, kHidden, kOut);
    Engine engine = tessera::initialize(model, Config::from_string(R"({"train_batch_size": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1,
                      "weight_decay_exclude": ["*.bias", "fc3.*"]}}})"), group);
    auto& groups = engine.optimizer().param_groups();
    ASSERT_EQ(groups.size(), 2u);
    auto wd = [](auto& g) {
      return static_cast<torch::optim::AdamWOptions&>(g.options()).weight_decay();
    };
    EXPECT_EQ(groups[0].params().size(), 2u);  // fc1.weight, fc2.weight
    EXPECT_DOUBLE_EQ(wd(groups[0]), 0.1);
    EXPECT_EQ(groups[1].params().size(), 4u);  // 3 biases + fc3.weight
    EXPECT_DOUBLE_EQ(wd(groups[1]), 0.0);
    EXPECT_EQ(engine.optimizer_parameters().names[0], "fc1.weight");
    try {
      tessera::initialize(model, Config::from_string(R"({"train_batch_size": 4,
          "optimizer": {"params": {"weight_decay": 0.1, "weight_decay_exclude": ["*.bais"]}}})"),
                          group);
      ADD_FAILURE() << "a pattern matching nothing was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'*.bais' matches no trainable parameter"),
                std::string::npos) << e.what();
    }
  });
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(EngineContracts, MisuseIsAnErrorThatSaysWhatToDo) {
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 10);
    Mlp model(kIn, kHidden, kOut);
    Engine engine = tessera::initialize(
        model, Config::from_string(R"({"train_micro_batch_size_per_gpu": 4,
            "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})"), group);
    auto x = data_for(0, 4, kIn, rank), y = data_for(0, 4, kOut, 10 + rank);
    auto loss = torch::mse_loss(model->forward(x), y);
    engine.backward(loss);
    auto early = torch::mse_loss(model->forward(x), y);  // computed before the step
    EXPECT_NE(error_of([&] { engine.backward(early); }).find("call engine.step() after every"),
              std::string::npos);
    EXPECT_TRUE(engine.step());
    EXPECT_NE(error_of([&] { engine.step(); }).find("step called twice after one backward()"),
              std::string::npos);
    EXPECT_NE(error_of([&] { engine.backward(loss); }).find("already backpropagated"),
              std::string::npos);
    const std::string stale = error_of([&] { engine.backward(early); });
    EXPECT_NE(stale.find("computed before the last engine.step()"), std::string::npos) << stale;
    EXPECT_NE(error_of([&] { engine.backward(torch::ones({})); }).find("does not require grad"),
              std::string::npos);
    // The engine still works after refusing.
    engine.backward(torch::mse_loss(model->forward(x), y));
    EXPECT_TRUE(engine.step());
    EXPECT_EQ(engine.global_steps(), 2);
  });
}

// A module with two forward() overloads: engine.forward cannot pick one.
struct OverloadedImpl : torch::nn::Module {
  OverloadedImpl() : fc(register_module("fc", torch::nn::Linear(kIn, kOut))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(x); }
  torch::Tensor forward(const torch::Tensor& x, double scale) { return fc(x) * scale; }
  torch::nn::Linear fc;
};
TORCH_MODULE(Overloaded);

TEST(EngineContracts, ForwardOfAnOverloadedModuleSaysToCallItDirectly) {
  tessera::testing::run_ranks(1, [&](int rank, int size, auto store) {
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 10);
    Overloaded model;
    Engine engine = tessera::initialize(model, Config::from_string(R"({"train_batch_size": 2})"),
                                        group);
    const std::string e = error_of([&] { engine.forward(torch::zeros({2, kIn})); });
    EXPECT_NE(e.find("call the module's forward directly"), std::string::npos) << e;
    engine.backward(model->forward(torch::ones({2, kIn}), 2.0).sum());
    EXPECT_TRUE(engine.step());
  });
}

// LibTorch 2.x's optimizer.zero_grad() sets .grad to None. The engine rebinds the
// gradients to their buckets before backward, so autograd accumulates into the
// buckets directly, and the result is the same as with in-place zeroing.
TEST(EngineContracts, SetToNoneGradientsAreReboundWithoutChangingResults) {
  torch::manual_seed(13);
  Mlp init(kIn, kHidden, kOut);
  std::mutex mu;
  double diff = -1;
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = tessera::testing::make_group(rank, size, store, "gloo");
    const Config cfg = Config::from_string(R"({"train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "Adam", "params": {"lr": 0.01}}})");
    Mlp a(kIn, kHidden, kOut), b(kIn, kHidden, kOut);
    copy_params(*a, *init);
    copy_params(*b, *init);
    Engine ea = tessera::initialize(a, cfg, group);
    Engine eb = tessera::initialize(b, cfg, group);
    auto in_bucket = [&](const at::Tensor& g) {
      for (const auto& flat : eb.ddp().reducer().bucket_buffers()) {
        const char* lo = static_cast<const char*>(flat.data_ptr());
        const char* p = static_cast<const char*>(g.data_ptr());
        if (p >= lo && p < lo + flat.nbytes()) return true;
      }
      return false;
    };
    for (int64_t s = 0; s < 4; ++s) {
      auto x = data_for(s, 4, kIn, rank), y = data_for(s, 4, kOut, 10 + rank);
      ea.backward(torch::mse_loss(a->forward(x), y));
      ea.step();
      for (auto& p : b->parameters()) p.mutable_grad() = at::Tensor();  // 2.x's zero_grad
      eb.backward(torch::mse_loss(b->forward(x), y));
      for (auto& p : b->parameters()) EXPECT_TRUE(in_bucket(p.grad()));
      eb.step();
      for (auto& p : b->parameters()) {
        EXPECT_TRUE(in_bucket(p.grad()));
        EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);  // zeroed in place by step()
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    diff = std::max(diff, max_abs_diff(*a, *b));
  });
  EXPECT_EQ(diff, 0.0);
}

}  // namespace
}  // namespace tessera::runtime
