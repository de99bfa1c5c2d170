// nvme offload in the Engine (ranks as threads over gloo): training with the
// optimizer state, and under stage 3 the parameter shards, on disk gives the
// same parameters, bit for bit, as training in memory; checkpoints move between
// offloaded and in-memory engines; memory_stats() shows the state gone from
// memory; bad settings fail before training; the swap files go with the engine.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "tessera/models/gpt.h"
#include "tessera/runtime/engine.h"
#include "testing/files.h"
#include "testing/thread_ranks.h"
#include "zero_test_gpt.h"

namespace tessera::runtime {
namespace {

namespace fs = std::filesystem;
constexpr int kGlobalMicro = 8;

struct RunSetup {
  int world = 1;
  int stage = 2;
  std::string optimizer = "AdamW";  // or SGD
  bool offload_optimizer = false;
  bool offload_param = false;
  int64_t buffer_size = 4096;  // elements per piece: several pieces per shard
  int buffer_count = 4;
  std::string nvme_path;
};

RunSetup setup(int world, int stage, const std::string& optimizer = "AdamW",
               bool offload_optimizer = false, bool offload_param = false) {
  RunSetup s;
  s.world = world;
  s.stage = stage;
  s.optimizer = optimizer;
  s.offload_optimizer = offload_optimizer;
  s.offload_param = offload_param;
  return s;
}

Config make_config(const RunSetup& s) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0.5,
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4}},
    "aio": {"block_size": 65536, "queue_depth": 4}})");
  j["train_micro_batch_size_per_gpu"] = kGlobalMicro / s.world;
  j["optimizer"] = s.optimizer == "SGD"
                       ? nlohmann::json::parse(R"({"type": "SGD", "params": {"lr": 0.05,
                                               "momentum": 0.9, "dampening": 0.1}})")
                       : nlohmann::json::parse(R"({"type": "AdamW", "params": {"lr": 0.003,
                                               "weight_decay": 0.1, "weight_decay_exclude": ["*ln_*"]}})");
  nlohmann::json z = {{"stage", s.stage}, {"reduce_bucket_size", 3000},
                      {"stage3_param_persistence_threshold", 100}};
  if (s.offload_optimizer) {
    z["offload_optimizer"] = {{"device", "nvme"}, {"nvme_path", s.nvme_path},
                              {"buffer_size", s.buffer_size}, {"buffer_count", s.buffer_count}};
  }
  if (s.offload_param) {
    z["offload_param"] = {{"device", "nvme"}, {"nvme_path", s.nvme_path},
                          {"buffer_count", s.buffer_count}};
  }
  j["zero_optimization"] = z;
  return Config::from_json(j);
}

std::pair<at::Tensor, at::Tensor> batch(int64_t s, int rank, int world) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(100 + s));
  auto t = at::randint(64, {kGlobalMicro, 17}, gen, at::kLong);
  const int64_t per = kGlobalMicro / world;
  t = t.narrow(0, rank * per, per);
  return {t.narrow(1, 0, 16), t.narrow(1, 1, 16)};
}

using Params = std::map<std::string, at::Tensor>;

struct Result {
  Params params;        // rank 0's, after training
  MemoryStats memory;   // rank 0's, after the last step
  std::string swap_dir_seen;
};

// Trains `steps` steps (after loading `load_from`, saving to `save_to` after
// `save_after` of them when given).
Result train(const RunSetup& s, int steps, const std::string& load_from = "",
             const std::string& save_to = "", int save_after = -1) {
  Result out;
  std::mutex mu;
  tessera::testing::run_ranks(s.world, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 60);
    models::GPT model(testing::zero_test_gpt());
    Engine engine = tessera::initialize(model, make_config(s), group);
    if (!load_from.empty()) engine.load_checkpoint(load_from);
    const int64_t first = engine.global_steps();
    for (int64_t k = 0; k < steps; ++k) {
      if (k == save_after) engine.save_checkpoint(save_to);
      auto [x, y] = batch(first + k, rank, size);
      engine.backward(model->loss(x, y));
      engine.step();
    }
    if (s.stage == 3) engine.zero().gather_all();
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& p : model->named_parameters()) out.params[p.key()] = p.value().detach().clone();
      out.memory = engine.memory_stats();
    }
    if (s.stage == 3) engine.zero().release_all();
  });
  return out;
}

// Counts parameters that differ in any bit.
int differing(const Params& a, const Params& b, double* max_diff) {
  int n = 0;
  *max_diff = 0;
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    const at::Tensor& u = b.at(name);
    if (!at::equal(t, u)) ++n;
    *max_diff = std::max(*max_diff, (t - u).abs().max().item<double>());
  }
  return n;
}

int swap_dirs_left(const std::string& nvme_path) {
  const fs::path root = fs::path(nvme_path) / "tessera-offload";
  if (!fs::exists(root)) return 0;
  return static_cast<int>(std::distance(fs::directory_iterator(root), fs::directory_iterator()));
}

struct Case {
  int world;
  int stage;
  bool offload_param;
  std::string optimizer;
  int buffer_count;
};

class OffloadParity : public ::testing::TestWithParam<Case> {};

TEST_P(OffloadParity, TwentyStepsOnDiskEqualTwentyStepsInMemoryBitForBit) {
  const Case c = GetParam();
  tessera::testing::TempDir disk("offload_parity");
  RunSetup memory = setup(c.world, c.stage, c.optimizer);
  RunSetup nvme = memory;
  nvme.offload_optimizer = true;
  nvme.offload_param = c.offload_param;
  nvme.buffer_count = c.buffer_count;
  nvme.nvme_path = disk.path();
  const Result a = train(memory, 20);
  const Result b = train(nvme, 20);
  double d = 0;
  const int n = differing(a.params, b.params, &d);
  std::printf("[offload] %d ranks, stage %d%s, %s, %d buffers: %d of %zu parameters differ, "
              "max |diff| %.3g; optimizer state in memory %lld -> %lld bytes, buffers %lld, "
              "swap files %lld bytes\n",
              c.world, c.stage, c.offload_param ? " + offload_param" : "", c.optimizer.c_str(),
              c.buffer_count, n, a.params.size(), d,
              static_cast<long long>(a.memory.optimizer_bytes),
              static_cast<long long>(b.memory.optimizer_bytes),
              static_cast<long long>(b.memory.offload_buffer_bytes),
              static_cast<long long>(b.memory.offload_file_bytes));
  EXPECT_EQ(n, 0);
  // The moved work must have happened: training changed the parameters.
  double moved = 0;
  differing(train(memory, 0).params, a.params, &moved);
  EXPECT_GT(moved, 1e-3);
  // The state is on disk, not in memory; the files hold all of it.
  EXPECT_GT(a.memory.optimizer_bytes, 0);
  EXPECT_EQ(b.memory.optimizer_bytes, 0);
  EXPECT_GE(b.memory.offload_file_bytes, a.memory.optimizer_bytes);
  EXPECT_GT(b.memory.offload_buffer_bytes, 0);
  if (c.offload_param) {
    // Stage-3 shards went to disk as well: fewer parameter bytes stay in memory.
    EXPECT_LT(b.memory.param_bytes, a.memory.param_bytes);
  }
  EXPECT_EQ(swap_dirs_left(disk.path()), 0) << "the swap files outlived the engines";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, OffloadParity,
    ::testing::Values(Case{1, 2, false, "AdamW", 4}, Case{2, 1, false, "AdamW", 2},
                      Case{2, 2, false, "SGD", 1}, Case{1, 3, true, "AdamW", 3},
                      Case{2, 3, true, "AdamW", 4}, Case{2, 3, false, "AdamW", 4}),
    [](const auto& info) {
      const Case& c = info.param;
      return "w" + std::to_string(c.world) + "_stage" + std::to_string(c.stage) +
             (c.offload_param ? "_param" : "") + "_" + c.optimizer + "_b" +
             std::to_string(c.buffer_count);
    });

TEST(OffloadCheckpoint, MovesBetweenDiskAndMemoryAndResumesExactly) {
  tessera::testing::TempDir disk("offload_ckpt_disk");
  tessera::testing::TempDir ckpt("offload_ckpt");
  RunSetup nvme = setup(2, 3, "AdamW", true, true);
  nvme.nvme_path = disk.path();
  RunSetup memory = setup(2, 3, "AdamW");
  // Saved from disk after 3 steps; 6 steps straight.
  const Result straight = train(nvme, 6, "", ckpt.path(), 3);
  const std::string step3 = ckpt.path() + "/step_3";
  ASSERT_TRUE(fs::exists(step3 + "/manifest.json"));
  double d = 0;
  // Offloaded -> offloaded, and offloaded -> in memory: the same sums, bit for bit.
  EXPECT_EQ(differing(train(nvme, 3, step3).params, straight.params, &d), 0) << d;
  EXPECT_EQ(differing(train(memory, 3, step3).params, straight.params, &d), 0) << d;
  // Resharded to 1 rank at stage 2 (other summation order: float rounding only).
  RunSetup other = setup(1, 2, "AdamW", true);
  other.nvme_path = disk.path();
  differing(train(other, 3, step3).params, straight.params, &d);
  EXPECT_LE(d, 1e-5);
  // In memory -> offloaded.
  tessera::testing::TempDir ckpt2("offload_ckpt2");
  const Result straight_memory = train(memory, 6, "", ckpt2.path(), 3);
  EXPECT_EQ(differing(train(nvme, 3, ckpt2.path() + "/step_3").params, straight_memory.params, &d),
            0) << d;
  EXPECT_EQ(swap_dirs_left(disk.path()), 0);
}

TEST(OffloadCheckpoint, ADamagedCheckpointChangesNothingOnDisk) {
  tessera::testing::TempDir disk("offload_bad_disk");
  tessera::testing::TempDir ckpt("offload_bad_ckpt");
  RunSetup nvme = setup(2, 3, "AdamW", true, true);
  nvme.nvme_path = disk.path();
  train(nvme, 2, "", ckpt.path(), 1);
  const std::string shard = ckpt.path() + "/step_1/rank_00001.tsr";
  std::string bytes = tessera::testing::read_text_file(shard);
  ASSERT_GT(bytes.size(), 1000u);
  bytes[bytes.size() - 100] ^= 0x40;
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
  // 4 steps with a refused load after the second equal 4 steps without it.
  const Result straight = train(nvme, 4);
  Result refused;
  std::mutex mu;
  int errors = 0;
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 60);
    models::GPT model(testing::zero_test_gpt());
    Engine engine = tessera::initialize(model, make_config(nvme), group);
    for (int64_t k = 0; k < 4; ++k) {
      if (k == 2) {
        try {
          engine.load_checkpoint(ckpt.path() + "/step_1");
        } catch (const CheckpointError&) {
          std::lock_guard<std::mutex> lock(mu);
          ++errors;
        }
      }
      auto [x, y] = batch(k, rank, size);
      engine.backward(model->loss(x, y));
      engine.step();
    }
    engine.zero().gather_all();
    if (rank == 0) {
      for (auto& p : model->named_parameters()) refused.params[p.key()] = p.value().detach().clone();
    }
    engine.zero().release_all();
  });
  EXPECT_EQ(errors, 2);
  double d = 0;
  EXPECT_EQ(differing(refused.params, straight.params, &d), 0) << d;
}

TEST(OffloadConfig, BadSettingsFailBeforeTraining) {
  auto error_of = [](const std::string& json) -> std::string {
    try {
      Config::from_string(json);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})")
                .find("needs 'nvme_path'"), std::string::npos);
  EXPECT_NE(error_of(R"({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "nvme",
                        "nvme_path": "/tmp"}}})").find("needs ZeRO"), std::string::npos);
  EXPECT_NE(error_of(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme",
                        "nvme_path": "/tmp"}, "offload_param": {"device": "nvme", "nvme_path": "/tmp"}}})")
                .find("needs zero_optimization.stage 3"), std::string::npos);
  EXPECT_NE(error_of(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme",
                        "nvme_path": "/tmp"}}})").find("needs offload_optimizer.device nvme"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "disk"}}})")
                .find("use none, cpu or nvme"), std::string::npos);
  EXPECT_NE(error_of(R"({"aio": {"block_size": 1000}})").find("multiple of 4096"), std::string::npos);
  EXPECT_NE(error_of(R"({"aio": {"queue_dept": 4}})").find("queue_depth"), std::string::npos);
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu",
                        "pin_memory": true}, "offload_param": {"device": "cpu"}}})"), "");

  // A missing disk is refused by every rank when the engine is built.
  tessera::testing::TempDir disk("offload_missing");
  RunSetup s = setup(2, 2, "AdamW", true);
  s.nvme_path = disk.path() + "/not-mounted";
  std::mutex mu;
  int refused = 0;
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 60);
    models::GPT model(testing::zero_test_gpt());
    try {
      Engine engine = tessera::initialize(model, make_config(s), group);
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("not-mounted"), std::string::npos) << e.what();
      std::lock_guard<std::mutex> lock(mu);
      ++refused;
    }
  });
  EXPECT_EQ(refused, 2);
  // A unit larger than offload_param's buffers.
  s = setup(1, 3, "AdamW", true, true);
  s.nvme_path = disk.path();
  Config c = make_config(s);
  c.zero.offload_param.buffer_size = 1000;
  models::GPT model(testing::zero_test_gpt());
  tessera::testing::run_ranks(1, [&](int rank, int size, auto store) {
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 60);
    try {
      Engine engine = tessera::initialize(model, c, group);
      ADD_FAILURE() << "a unit larger than the buffers was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("raise buffer_size"), std::string::npos) << e.what();
    }
  });
  EXPECT_EQ(swap_dirs_left(disk.path()), 0);
}

TEST(OffloadConfig, OptimizersWithoutKnownStateAreRefused) {
  tessera::testing::TempDir disk("offload_rmsprop");
  RunSetup s = setup(1, 2, "AdamW", true);
  s.nvme_path = disk.path();
  Config c = make_config(s);
  c.optimizer.present = false;
  tessera::testing::run_ranks(1, [&](int rank, int size, auto store) {
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 60);
    models::GPT model(testing::zero_test_gpt());
    try {
      tessera::OptimizerFactory rmsprop = [](std::vector<torch::optim::OptimizerParamGroup> groups) {
        return std::make_unique<torch::optim::RMSprop>(std::move(groups));
      };
      Engine engine = tessera::initialize(model, c, rmsprop, std::vector<torch::optim::OptimizerParamGroup>{}, group);
      ADD_FAILURE() << "RMSprop's opaque state was accepted for offload";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("RMSprop"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace tessera::runtime
