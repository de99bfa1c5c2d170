// Tensor, pipeline, context and data parallelism in real processes: `tessera
// run -n 4 tessera train` under tp4, pp4, tp2·pp2, tp2·dp2, pp2·dp2 (with DDP or
// ZeRO-1 over dp), pp2 with interleaving (v = 2) and cp4, tp2·cp2, cp2·dp2
// (every cp_comm_type, over shm and gloo), with each pipeline schedule, ends
// 10 steps later with the same parameters as `tessera train` in one process on
// the same global batch (read back from each run's final checkpoint, which holds
// the dense tensors whatever the layout). A layout that cannot work fails before any model is
// built, on every rank, and the launcher exits non-zero.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <torch/torch.h>

#include <map>
#include <nlohmann/json.hpp>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/module_state.h"
#include "tessera/checkpoint/sharded_tensors.h"
#include "tessera/checkpoint/state_dict_file.h"
#include "tessera/cli/commands/train_data.h"
#include "tessera/cli/commands/train_settings.h"
#include "tessera/models/gpt.h"
#include "tessera/runtime/config.h"
#include "testing/files.h"
#include "testing/metrics_file.h"
#include "testing/subprocess.h"
#include "testing/train_cli.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

class ModelParallelCli : public ::testing::Test {
 public:
  void SetUp() override {
    std::ofstream text(dir_ / "corpus.txt");
    for (int i = 0; i < 300; ++i) text << "pack my box with " << i % 5 << " dozen liquor jugs.\n";
  }

  // The same model, data and global batch (8) for every layout; `layout` adds
  // the Megatron keys.
  std::string config(const std::string& name, const std::string& layout) {
    const std::string path = (dir_ / (name + ".json")).string();
    std::ofstream(path) << "{" << layout << R"(
      "train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
      "seed": 5, "gradient_clipping": 1.0,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3}},
      "model": {"n_layer": 4, "n_head": 4, "n_embd": 32, "block_size": 16, "dropout": 0.0,
                "bias": false},
      "data": {"path": ")" << (dir_ / "corpus.txt").string() << R"(", "val_fraction": 0.1},
      "train": {"steps": 10, "eval_interval": 0, "eval_iters": 2, "checkpoint_interval": 5,
                "sample_length": 0}})";
    return path;
  }

  // `env`: variables for the run, such as TESSERA_BACKEND=gloo (default: shm,
  // the ranks share this host).
  CommandResult train(const std::string& name, const std::string& layout, int ranks,
                      const std::string& flags = "", const std::string& env = "") {
    return run_train(config(name, layout), (dir_ / name).string(), ranks, flags, env);
  }

  // Largest |a - b| over every model tensor of two checkpoints (run/step_N),
  // which must hold the same model tensors.
  double max_param_diff(const std::string& a, const std::string& b) {
    int na = 0, nb = 0;
    const double d = max_model_diff((dir_ / a).string(), (dir_ / b).string(), &na, "", &nb);
    EXPECT_EQ(na, nb) << a << " and " << b << " hold different model tensors";
    return d;
  }

  TempDir tmp_{"mp_cli"};
  fs::path dir_{tmp_.path()};
};

TEST_F(ModelParallelCli, EveryLayoutAtFourRanksEndsWhereOneProcessEnds) {
  auto ref = train("ref", "", 1);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  // The comparison can fail: five steps move the parameters far beyond the bound.
  const double moved = max_param_diff("ref/step_5", "ref/step_10");
  std::printf("[model parallel cli] one process, steps 5 to 10 moved parameters by up to %.3g\n",
              moved);
  EXPECT_GT(moved, 1e-2);
  struct Layout {
    const char* name;
    const char* keys;
  };
  const Layout layouts[] = {
      {"tp4", R"("tensor_model_parallel_size": 4,)"},
      {"tp4_sp", R"("tensor_model_parallel_size": 4, "sequence_parallel": true,)"},
      {"pp4_1f1b", R"("pipeline_model_parallel_size": 4,)"},
      {"pp4_gpipe", R"("pipeline_model_parallel_size": 4, "pipeline_schedule": "gpipe",)"},
      {"tp2_pp2_1f1b", R"("tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,)"},
      {"tp2_pp2_gpipe", R"("tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
                           "pipeline_schedule": "gpipe",)"},
      {"tp2_dp2", R"("tensor_model_parallel_size": 2,)"},
      {"tp2_dp2_zero1", R"("tensor_model_parallel_size": 2, "zero_optimization": {"stage": 1},)"},
      {"pp2_dp2_1f1b", R"("pipeline_model_parallel_size": 2,)"},
      {"pp2_dp2_gpipe", R"("pipeline_model_parallel_size": 2, "pipeline_schedule": "gpipe",)"},
      {"pp2_dp2_zero1", R"("pipeline_model_parallel_size": 2, "zero_optimization": {"stage": 1},)"},
      {"pp2_v2", R"("pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2,)"},
  };
  for (const auto& l : layouts) {
    auto run = train(l.name, l.keys, 4);
    ASSERT_EQ(run.exit_code, 0) << l.name << "\n" << run.output;
    EXPECT_NE(run.output.find("step    10/10"), std::string::npos) << run.output;
    const double d = max_param_diff("ref/step_10", std::string(l.name) + "/step_10");
    std::printf("[model parallel cli] %-14s max |param - one process| after 10 steps: %.3g\n",
                l.name, d);
    EXPECT_LE(d, 1e-4) << l.name;
  }
}

std::map<int64_t, double> losses(const fs::path& metrics) { return read_metric(metrics.string()); }

// `from`'s step-5 checkpoint resumed by `layout` in `to`: steps 6-10's losses
// against `from`'s own.
double resumed_loss_diff(ModelParallelCli& t, const fs::path& dir, const std::string& from,
                         const std::string& to, const std::string& layout,
                         std::string* output) {
  fs::create_directories(dir / to);
  fs::copy(dir / from / "step_5", dir / to / "step_5", fs::copy_options::recursive);
  auto run = t.train(to, layout, 4, " --resume");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  *output = run.output;
  const auto want = losses(dir / from / "metrics.jsonl");
  const auto got = losses(dir / to / "metrics.jsonl");
  EXPECT_EQ(got.size(), 5u) << run.output;
  double worst = 0;
  for (int64_t step = 6; step <= 10; ++step) {
    EXPECT_TRUE(got.count(step) && want.count(step)) << "no loss for step " << step;
    if (got.count(step) && want.count(step)) worst = std::max(worst, std::abs(got.at(step) - want.at(step)));
  }
  return worst;
}

TEST_F(ModelParallelCli, CheckpointsResumeAcrossLayoutsAndConsolidate) {
  const std::string tp2pp2 = R"("tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,)";
  ASSERT_EQ(train("a", tp2pp2, 4).exit_code, 0);
  ASSERT_EQ(train("c", "", 4).exit_code, 0);
  std::string out;
  const double to_dp4 = resumed_loss_diff(*this, dir_, "a", "b", "", &out);
  EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
  const double to_tp2pp2 = resumed_loss_diff(*this, dir_, "c", "d", tp2pp2, &out);
  std::printf("[model parallel cli] resumed at step 5, steps 6-10 max |loss diff|: tp2.pp2 -> dp4 "
              "%.3g, dp4 -> tp2.pp2 %.3g\n", to_dp4, to_tp2pp2);
  EXPECT_LE(to_dp4, 1e-5);
  EXPECT_LE(to_tp2pp2, 1e-5);

  auto info = run_command(tessera_bin() + " ckpt info " + (dir_ / "a").string() + " 2>&1", 60);
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("layout      tp2 x pp2 (v 1)"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("model.h.0.attn.c_attn.weight"), std::string::npos) << info.output;

  // The tp2·pp2 checkpoint consolidates into the dense GPT, whose validation
  // loss on the batches the run evaluated is the one it logged.
  const fs::path pt = dir_ / "gpt.pt";
  auto cons = run_command(tessera_bin() + " ckpt consolidate " + (dir_ / "a").string() + " " +
                              pt.string() + " 2>&1", 120);
  ASSERT_EQ(cons.exit_code, 0) << cons.output;
  runtime::Config cfg = runtime::Config::from_file(config("a", tp2pp2));
  cli::TrainSettings s = cli::TrainSettings::from_config(cfg);
  models::GPT gpt(s.model);
  checkpoint::load_module_state(*gpt, checkpoint::load_state_dict_file(pt.string()));
  torch::NoGradGuard no_grad;
  gpt->eval();
  cli::TrainData data(s, 1, 0, cfg.seed);  // tp2·pp2 at 4 ranks is one replica
  double sum = 0;
  for (int64_t i = 0; i < s.eval_iters; ++i) {
    auto [x, y] = data.eval_batch(i, 1);
    sum += gpt->loss(x, y).item<double>();
  }
  double logged = -1;
  std::ifstream in(dir_ / "a" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss")) logged = j["val_loss"].get<double>();
  }
  std::printf("[model parallel cli] consolidated tp2.pp2 GPT: val loss %.7f, the run logged %.7f\n",
              sum / s.eval_iters, logged);
  EXPECT_NEAR(sum / s.eval_iters, logged, 1e-5);
}

// Context parallelism in real processes, over shm and over gloo: ring,
// all-to-all and all-gather attention, alone and with tp, dp and ZeRO-1, end
// where one process ends; a checkpoint saved at cp4 resumes in one process and
// at cp2·dp2 with the same next losses.
TEST_F(ModelParallelCli, ContextParallelEndsWhereOneProcessEndsAndResumesAtOtherLayouts) {
  ASSERT_EQ(train("ref", "", 1).exit_code, 0);
  struct Layout {
    const char* name;
    const char* keys;
    const char* env;
  };
  const Layout layouts[] = {
      {"cp4_p2p_shm", R"("context_parallel_size": 4,)", ""},
      {"cp4_a2a_gloo", R"("context_parallel_size": 4, "cp_comm_type": "a2a",)",
       "TESSERA_BACKEND=gloo"},
      {"tp2_cp2_p2p_gloo", R"("tensor_model_parallel_size": 2, "context_parallel_size": 2,)",
       "TESSERA_BACKEND=gloo"},
      {"cp2_dp2_zero1_allgather_shm", R"("context_parallel_size": 2, "cp_comm_type": "allgather",
                                         "zero_optimization": {"stage": 1},)", ""},
  };
  for (const auto& l : layouts) {
    auto run = train(l.name, l.keys, 4, "", l.env);
    ASSERT_EQ(run.exit_code, 0) << l.name << "\n" << run.output;
    EXPECT_NE(run.output.find("step    10/10"), std::string::npos) << run.output;
    const double d = max_param_diff("ref/step_10", std::string(l.name) + "/step_10");
    std::printf("[context parallel cli] %-28s max |param - one process| after 10 steps: %.3g\n",
                l.name, d);
    EXPECT_LE(d, 1e-4) << l.name;
  }
  // The cp4 run's step-5 checkpoint, resumed elsewhere: steps 6-10's losses.
  const auto want = losses(dir_ / "cp4_p2p_shm" / "metrics.jsonl");
  for (auto [to, keys, ranks] : {std::tuple{"cp4_to_one", "", 1},
                                 std::tuple{"cp4_to_cp2_dp2", R"("context_parallel_size": 2,)", 4}}) {
    fs::create_directories(dir_ / to);
    fs::copy(dir_ / "cp4_p2p_shm" / "step_5", dir_ / to / "step_5", fs::copy_options::recursive);
    auto run = train(to, keys, ranks, " --resume");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("resumed from"), std::string::npos) << run.output;
    const auto got = losses(dir_ / to / "metrics.jsonl");
    double worst = 0;
    for (int64_t step = 6; step <= 10; ++step) {
      ASSERT_TRUE(got.count(step) && want.count(step)) << to << ": no loss for step " << step;
      worst = std::max(worst, std::abs(got.at(step) - want.at(step)));
    }
    std::printf("[context parallel cli] cp4 step 5 resumed as %s: steps 6-10 max |loss diff| %.3g\n",
                to, worst);
    EXPECT_LE(worst, 1e-5) << to;
  }
}

TEST_F(ModelParallelCli, BadLayoutFailsOnEveryRankBeforeAnyModelIsBuilt) {
  auto run = train("bad", R"("tensor_model_parallel_size": 3,)", 4);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("tensor_model_parallel_size 3 x pipeline_model_parallel_size 1 = 3 "
                            "does not divide the world size 4"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("tessera train: GPT"), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(dir_ / "bad")) << "nothing may be written for a bad layout";
  auto stages = train("stages", R"("pipeline_model_parallel_size": 4,
                                    "virtual_pipeline_model_parallel_size": 2,)", 4);
  EXPECT_NE(stages.exit_code, 0);
  EXPECT_NE(stages.output.find("8 pipeline chunks but the model has only 4 layers"),
            std::string::npos) << stages.output;
}

}  // namespace
}  // namespace tessera::testing
