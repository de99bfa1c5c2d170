// Universal checkpoints: saved by one world size and ZeRO stage, loaded by any
// other (ranks as threads over gloo). Every run sees the same global batch per
// micro-step, split evenly over its ranks, so the continued runs must end where
// the uninterrupted one does. Also: damaged shards are refused before anything
// changes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/model_export.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/checkpoint/sharded_tensors.h"
#include "tessera/models/gpt.h"
#include "tessera/runtime/engine.h"
#include "testing/files.h"
#include "testing/thread_ranks.h"
#include "zero_test_gpt.h"

namespace tessera::runtime {
namespace {

namespace fs = std::filesystem;
constexpr int kGlobalMicro = 12;  // samples per micro-step, all ranks together


Config zero_config(int stage) {
  return Config::from_string(R"({
    "train_batch_size": )" + std::to_string(2 * kGlobalMicro) + R"(,
    "gradient_accumulation_steps": 2, "gradient_clipping": 0.5,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1,
                  "weight_decay_exclude": ["*ln_*", "wpe.*"]}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4}},
    "zero_optimization": {"stage": )" + std::to_string(stage) + R"(, "reduce_bucket_size": 3000,
                          "stage3_param_persistence_threshold": 100}})");
}

// This rank's rows of the global micro-batch (step s, micro-step m).
std::pair<at::Tensor, at::Tensor> batch(int64_t s, int m, int rank, int world) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(1000 * s + 10 * m));
  auto t = at::randint(64, {kGlobalMicro, 17}, gen, at::kLong);
  const int64_t per = kGlobalMicro / world;
  t = t.narrow(0, rank * per, per);
  return {t.narrow(1, 0, 16), t.narrow(1, 1, 16)};
}

using Params = std::map<std::string, at::Tensor>;

struct Run {
  int world = 1;
  int stage = 0;
  std::string load_from;  // "" = start fresh
  int steps = 0;          // steps to train after the (optional) load
  std::string save_to;    // "" = no save; else saved after save_after steps
  int save_after = 0;
  // Save in the background (checkpoint.async_mode) and go on training while it
  // is written; the engine waits for it after the last step.
  checkpoint::AsyncMode save_mode = checkpoint::AsyncMode::kDisabled;
};

// Trains `run` and returns rank 0's final parameters.
Params train(const Run& run) {
  Params out;
  std::mutex mu;
  tessera::testing::run_ranks(run.world, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 60);
    models::GPT model(testing::zero_test_gpt());
    Engine engine = tessera::initialize(model, zero_config(run.stage), group);
    if (!run.load_from.empty()) engine.load_checkpoint(run.load_from);
    const int64_t first = engine.global_steps();
    for (int64_t s = first; s < first + run.steps; ++s) {
      if (!run.save_to.empty() && s - first == run.save_after) {
        if (run.save_mode == checkpoint::AsyncMode::kDisabled) {
          engine.save_checkpoint(run.save_to);
        } else {
          engine.save_checkpoint_async(run.save_to, nlohmann::json::object(), 0, run.save_mode);
        }
      }
      for (int m = 0; m < 2; ++m) {
        auto [x, y] = batch(s, m, rank, size);
        engine.backward(model->loss(x, y));
        engine.step();
      }
    }
    if (run.save_mode != checkpoint::AsyncMode::kDisabled) {
      EXPECT_TRUE(engine.wait_for_checkpoint().has_value()) << "no save was in flight";
    }
    if (run.stage == 3) engine.zero().gather_all();
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& p : model->named_parameters()) out[p.key()] = p.value().detach().clone();
    }
    if (run.stage == 3) engine.zero().release_all();
  });
  return out;
}

double max_diff(const Params& a, const Params& b) {
  double m = 0;
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    EXPECT_NE(it, b.end()) << name;
    if (it != b.end()) m = std::max(m, (t - it->second).abs().max().item<double>());
  }
  return m;
}

TEST(ZeroCheckpoint, SavedAtOneWorldAndStageResumesAtAnyOther) {
  tessera::testing::TempDir dir("zero_ckpt");
  // Uninterrupted: 4 ranks, stage 3, 6 steps, saving after 3.
  const Params straight = train({4, 3, "", 6, dir.path(), 3});
  const std::string saved = dir.path() + "/step_3";
  auto reader = checkpoint::CheckpointReader::open(saved);
  EXPECT_EQ(reader.metadata().at("world_size"), 4);
  EXPECT_EQ(reader.metadata().at("zero_stage"), 3);
  ASSERT_EQ(reader.manifest().rank_file(3) != nullptr, true);
  // The sharded parameters are pieces; together they are whole tensors.
  checkpoint::CheckpointTensors all(reader);
  EXPECT_GT(all.info("model.wte.weight").pieces, 1u);
  EXPECT_EQ(all.info("model.wte.weight").shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(all.info("optim.wte.weight.exp_avg").shape, (std::vector<int64_t>{64, 32}));

  for (auto [world, stage] : {std::pair{2, 1}, {1, 0}, {3, 2}, {4, 3}}) {
    const double d = max_diff(train({world, stage, saved, 3, "", 0}), straight);
    std::printf("[zero ckpt] saved at 4 ranks stage 3, resumed at %d ranks stage %d: "
                "max |diff| after 3 more steps %.3g\n", world, stage, d);
    EXPECT_LE(d, 1e-5) << world << " ranks stage " << stage;
  }
}

TEST(ZeroCheckpoint, AnAsyncSaveHoldsTheStepItWasTakenAtWhileTrainingGoesOn) {
  using checkpoint::AsyncMode;
  for (auto [stage, mode] : {std::pair{3, AsyncMode::kAsync}, {0, AsyncMode::kAsyncWithPinnedMem}}) {
    tessera::testing::TempDir dir("zero_async_ckpt");
    // The parameters change three more times while step 3 is written.
    const Params straight = train({2, stage, "", 6, dir.path(), 3, mode});
    const std::string saved = dir.path() + "/step_3";
    EXPECT_EQ(checkpoint::latest_checkpoint(dir.path()), saved);
    const double d = max_diff(train({2, stage, saved, 3, "", 0}), straight);
    std::printf("[zero ckpt] %s save at step 3, stage %d, resumed: max |diff| after 3 more "
                "steps %.3g\n", checkpoint::async_mode_name(mode), stage, d);
    EXPECT_EQ(d, 0.0) << "the checkpoint is not the state of step 3";
  }
}

TEST(ZeroCheckpoint, DataParallelCheckpointLoadsIntoStageThree) {
  tessera::testing::TempDir dir("zero_ckpt0");
  const Params straight = train({2, 0, "", 4, dir.path(), 2});
  const double d = max_diff(train({4, 3, dir.path() + "/step_2", 2, "", 0}), straight);
  std::printf("[zero ckpt] saved at 2 ranks stage 0, resumed at 4 ranks stage 3: %.3g\n", d);
  EXPECT_LE(d, 1e-5);
}

// DeepSpeed's stage3_gather_16bit_weights_on_model_save: each save, synchronous
// or in the background, also holds the whole model in one safetensors file.
TEST(ZeroCheckpoint, GatheredWeightsOnModelSaveHoldTheWholeModel) {
  tessera::testing::TempDir dir("zero_gather16");
  Params final_params;
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 60);
    models::GPT model(testing::zero_test_gpt());
    Config config = zero_config(3);
    config.zero.gather_16bit_weights_on_model_save = true;
    Engine engine = tessera::initialize(model, config, group);
    for (int64_t s = 0; s < 3; ++s) {
      if (s == 2) engine.save_checkpoint(dir.path());
      for (int m = 0; m < 2; ++m) {
        auto [x, y] = batch(s, m, rank, size);
        engine.backward(model->loss(x, y));
        engine.step();
      }
    }
    engine.save_checkpoint_async(dir.path(), nlohmann::json::object(), 0,
                                 checkpoint::AsyncMode::kAsync);
    EXPECT_TRUE(engine.wait_for_checkpoint().has_value());
    engine.zero().gather_all();
    if (rank == 0) {
      for (auto& p : model->named_parameters()) final_params[p.key()] = p.value().detach().clone();
    }
    engine.zero().release_all();
  });
  ASSERT_TRUE(fs::exists(dir.path() + "/step_2/model.safetensors"));
  auto file = checkpoint::SafetensorsFile::open(dir.path() + "/step_3/model.safetensors");
  EXPECT_EQ(file.metadata().at("step"), "3");
  ASSERT_EQ(file.names().size(), final_params.size());
  for (const auto& [name, t] : final_params) {
    ASSERT_TRUE(file.contains(name)) << name;
    EXPECT_EQ(file.tensor(name).scalar_type(), at::kFloat) << "training in float32";
    EXPECT_TRUE(file.tensor(name).equal(t)) << name << " is not the gathered parameter";
  }
  // The 16-bit export of a bf16 run, from the same sharded step.
  checkpoint::export_model_safetensors(dir.path() + "/step_3", "model.", at::kBFloat16);
  auto half = checkpoint::SafetensorsFile::open(dir.path() + "/step_3/model.safetensors");
  for (const auto& [name, t] : final_params) {
    EXPECT_TRUE(half.tensor(name).equal(t.to(at::kBFloat16))) << name;
  }
  Config bf16 = Config::from_string(R"({"train_batch_size": 8, "bf16": {"enabled": true},
      "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}})");
  EXPECT_EQ(model_export_dtype(bf16), at::kBFloat16);
  EXPECT_EQ(model_export_dtype(zero_config(3)), std::nullopt);
}

// Every rank of a 2-rank stage-2 engine tries to load `step_dir`; each must get a
// CheckpointError containing every string of `expected`, with its parameters and
// step counter untouched.
void expect_refused(const std::string& step_dir, const std::vector<std::string>& expected) {
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 60);
    models::GPT model(testing::zero_test_gpt());
    Engine engine = tessera::initialize(model, zero_config(2), group);
    Params before;
    for (auto& p : model->named_parameters()) before[p.key()] = p.value().detach().clone();
    try {
      engine.load_checkpoint(step_dir);
      ADD_FAILURE() << "rank " << rank << " loaded a damaged checkpoint";
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      for (const auto& s : expected) EXPECT_NE(what.find(s), std::string::npos) << what;
    }
    Params after;
    for (auto& p : model->named_parameters()) after[p.key()] = p.value().detach().clone();
    EXPECT_EQ(max_diff(before, after), 0.0);
    EXPECT_EQ(engine.global_steps(), 0);
  });
}

TEST(ZeroCheckpoint, DamagedShardIsRefusedBeforeAnythingChanges) {
  tessera::testing::TempDir dir("zero_ckpt_bad");
  train({2, 2, "", 2, dir.path(), 1});
  const std::string step = dir.path() + "/step_1";
  const std::string shard = step + "/rank_00001.tsr";
  auto reader = checkpoint::CheckpointReader::open(step);
  const auto* file = reader.manifest().rank_file(1);
  ASSERT_NE(file, nullptr);
  // Flip one byte inside the last tensor of rank 1's file.
  const auto& victim = file->tensors.back();
  const std::string original = tessera::testing::read_text_file(shard);
  {
    std::string bytes = original;
    bytes[victim.offset + victim.nbytes / 2] ^= 0x40;
    std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
  }
  expect_refused(step, {"rank_00001.tsr", "corrupted", victim.name});
  // Truncated.
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << original.substr(0, original.size() / 2);
  expect_refused(step, {"rank_00001.tsr", "truncated"});
  // Missing: the error lists what the file held.
  fs::remove(shard);
  expect_refused(step, {"rank_00001.tsr", "missing", file->tensors.front().name});
}

}  // namespace
}  // namespace tessera::runtime
