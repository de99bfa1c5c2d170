// `tessera train` end to end through the real binary: bad configs fail before
// the first step with a message naming the problem; a 2-rank run through
// `tessera run` killed with SIGKILL after its step-10 checkpoint and resumed
// reproduces the straight run's per-step losses, dropout included; the same with
// ZeRO stage 3 and the optimizer state and parameter shards offloaded to disk;
// a worker killed while an asynchronous checkpoint is written in the background.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "testing/files.h"
#include "testing/metrics_file.h"
#include "testing/subprocess.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream text(dir_ / "corpus.txt");
    for (int i = 0; i < 400; ++i) text << "the quick brown fox " << i % 7 << " jumps over the lazy dog.\n";
  }

  // A tiny, fast config; `extra` is spliced into the top-level object.
  std::string write_config(const std::string& name, const std::string& extra = "",
                           const std::string& data_path = "") {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << R"({
      "train_micro_batch_size_per_gpu": 4, "steps_per_print": 1, "seed": 3,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 2, "total_num_steps": 20}},
      "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 32, "dropout": 0.1},
      "data": {"path": ")" << (data_path.empty() ? (dir_ / "corpus.txt").string() : data_path)
                         << R"("},
      "train": {"steps": 20, "eval_interval": 10, "eval_iters": 2, "checkpoint_interval": 10,
                "sample_length": 20})"
                         << extra << "}";
    return path;
  }

  CommandResult train(const std::string& args, int ranks = 1, double timeout = 120) {
    const std::string bin = tessera_bin();
    const std::string cmd = ranks == 1 ? bin + " train " + args
                                       : bin + " run --master-port 0 -n " + std::to_string(ranks) + " " + bin +
                                             " train " + args;
    return run_command("TESSERA_TIMEOUT=20 " + cmd + " 2>&1", timeout);
  }

  void expect_config_error(const std::string& config, const std::string& needle) {
    auto r = train("--config " + config + " --out " + (dir_ / "bad_out").string());
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step "), std::string::npos) << "trained anyway:\n" << r.output;
  }

  TempDir tmp_{"train"};
  fs::path dir_{tmp_.path()};
};

TEST_F(TrainCli, BadConfigsFailBeforeTraining) {
  expect_config_error(write_config("unknown.json", R"(, "gradient_clip": 1.0)"),
                      "unknown config key 'gradient_clip'; did you mean 'gradient_clipping'");
  expect_config_error(write_config("batch.json", R"(, "train_batch_size": 6)"),
                      "train_batch_size 6 != micro 4 * accumulation 1 * world 1");
  expect_config_error(write_config("nodata.json", "", "/nonexistent/corpus.txt"),
                      "/nonexistent/corpus.txt");
  expect_config_error(write_config("neg.json", R"(, "gradient_accumulation_steps": -1)"),
                      "'gradient_accumulation_steps' must be positive, got -1");
  std::string model_typo = write_config("model.json");
  {
    std::ifstream in(model_typo);
    std::string s((std::istreambuf_iterator<char>(in)), {});
    s.replace(s.find("\"n_layer\""), 9, "\"n_layers\"");
    std::ofstream(model_typo) << s;
  }
  expect_config_error(model_typo, "unknown config key 'model.n_layers'; did you mean 'n_layer'");
  expect_config_error((dir_ / "missing.json").string(), "cannot read config file");
}

std::map<int64_t, double> losses(const fs::path& metrics) { return read_metric(metrics.string()); }

// Runs `job` in the background and SIGKILLs it (the launcher, and through it the
// workers) as soon as the shell test `until` holds; waits until no process
// mentioning `out` is left.
CommandResult run_and_kill_when(const std::string& job, const std::string& until,
                                const fs::path& log, const fs::path& out) {
  auto killed = run_command("(" + job + " > " + log.string() + " 2>&1 & pid=$!; "
                            "for i in $(seq 1 6000); do " + until + " && break; sleep 0.01; done; "
                            "kill -KILL $pid; wait $pid; echo killed)", 120);
  for (int i = 0; i < 100 && count_processes(out.string()) > 0; ++i) ::usleep(50000);
  return killed;
}

// The largest difference between two runs' losses, step by step; both must
// have logged `steps` steps.
double worst_loss_diff(const fs::path& a_metrics, const fs::path& b_metrics, size_t steps,
                       std::map<int64_t, double>* a_losses = nullptr) {
  auto a = losses(a_metrics);
  auto b = losses(b_metrics);
  EXPECT_EQ(a.size(), steps);
  EXPECT_EQ(b.size(), steps);
  double worst = 0;
  for (auto& [step, loss] : a) worst = std::max(worst, std::abs(loss - b[step]));
  if (a_losses) *a_losses = a;
  return worst;
}

TEST_F(TrainCli, TwoRanksKilledAndResumedReproduceTheStraightRun) {
  const std::string cfg = write_config("tiny.json");
  const std::string bin = tessera_bin();
  auto straight = train("--config " + cfg + " --out " + (dir_ / "a").string(), 2);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  EXPECT_NE(straight.output.find("val loss"), std::string::npos) << straight.output;
  EXPECT_NE(straight.output.find("--- sample ---"), std::string::npos) << straight.output;

  // Same job, SIGKILLed (launcher and, through it, the workers) as soon as the
  // step-10 checkpoint is committed; training goes on in the meantime.
  const fs::path b = dir_ / "b";
  const std::string job = "TESSERA_TIMEOUT=20 " + bin + " run --master-port 0 -n 2 " + bin + " train --config " +
                          cfg + " --out " + b.string();
  auto killed = run_and_kill_when(job, "[ -f " + (b / "step_10" / "manifest.json").string() + " ]",
                                  dir_ / "killed.log", b);
  ASSERT_NE(killed.output.find("killed"), std::string::npos) << killed.output;
  ASSERT_EQ(count_processes(b.string()), 0) << "workers outlived the killed launcher";
  ASSERT_FALSE(fs::exists(b / "step_20")) << "the job finished before the kill; slow it down";
  const auto before = losses(b / "metrics.jsonl");
  const int64_t killed_at = before.empty() ? 0 : before.rbegin()->first;

  auto resumed = train("--config " + cfg + " --resume --out " + b.string(), 2);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + b.string() + "/step_10"), std::string::npos)
      << resumed.output;
  // metrics.jsonl is appended to: the resumed run's rows overwrite the killed
  // run's rows for the steps it repeated.
  std::map<int64_t, double> a;
  const double worst = worst_loss_diff(dir_ / "a" / "metrics.jsonl", b / "metrics.jsonl", 20, &a);
  std::printf("[train cli] 2 ranks, 20 straight vs killed at step %lld + resume from step 10: "
              "max |loss diff| %.3g (loss %.4f -> %.4f)\n", static_cast<long long>(killed_at),
              worst, a[1], a[20]);
  EXPECT_LE(worst, 1e-6);
  EXPECT_LT(a[20], a[1]);
  EXPECT_TRUE(fs::exists(b / "latest"));
  EXPECT_TRUE(fs::exists(b / "step_20" / "manifest.json"));
}

// A worker lost at step 13 of a `tessera run --max-restarts 1` job: the launcher
// restarts every worker, they resume from the step-10 checkpoint on their own
// (no --resume), and the losses equal the straight run's. A fresh run into that
// directory afterwards is refused before training: it would write older steps
// over the newer ones.
TEST_F(TrainCli, ARestartedJobResumesOnItsOwnAndAFreshRunNeverOverwritesNewerSteps) {
  const std::string cfg = write_config("tiny.json");
  const std::string bin = tessera_bin();
  auto straight = train("--config " + cfg + " --out " + (dir_ / "a").string(), 2);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const fs::path b = dir_ / "b";
  auto r = run_command("TESSERA_TIMEOUT=20 TESSERA_TEST_KILL_AT_STEP=1:13 " + bin +
                           " run --master-port 0 --max-restarts 1 -n 2 " + bin + " train --config " +
                           cfg + " --out " + b.string() + " 2>&1",
                       240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 (local rank 1, pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("restarting all workers (restart 1 of 1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from " + b.string() + "/step_10"), std::string::npos) << r.output;
  const double worst = worst_loss_diff(dir_ / "a" / "metrics.jsonl", b / "metrics.jsonl", 20);
  std::printf("[train cli] worker killed at step 13, restarted by the launcher, resumed from "
              "step 10 on its own: max |loss diff| vs the straight run %.3g\n", worst);
  EXPECT_LE(worst, 1e-6);

  auto fresh = train("--config " + cfg + " --out " + b.string(), 1);
  EXPECT_NE(fresh.exit_code, 0) << fresh.output;
  EXPECT_NE(fresh.output.find(b.string() + " holds checkpoints of an earlier run (up to step 20): "
                              "pass --resume to continue it"),
            std::string::npos)
      << fresh.output;
  EXPECT_EQ(fresh.output.find("| loss"), std::string::npos) << "trained anyway:\n" << fresh.output;
  EXPECT_TRUE(fs::exists(b / "step_20" / "manifest.json"));
}

// checkpoint.async_mode: saves every 5 steps are written in the background
// while training goes on. Rank 1 is SIGKILLed by its background writer in the
// save of step 10, after its own files are on disk and before the commit: step
// 5 stays the latest, the launcher restarts the workers, they resume from step 5
// and every loss equals the straight (synchronous) run's.
TEST_F(TrainCli, AWorkerKilledDuringABackgroundSaveResumesExactlyFromThePreviousCheckpoint) {
  const std::string bin = tessera_bin();
  auto straight = train("--config " + write_config("sync.json") + " --out " +
                        (dir_ / "a").string(), 2);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  std::string cfg = write_config("async.json", R"(, "checkpoint": {"async_mode": "async", "keep_latest_k": 0})");
  {
    std::string text = read_text_file(cfg);
    text.replace(text.find("\"checkpoint_interval\": 10"), 25, "\"checkpoint_interval\": 5 ");
    std::ofstream(cfg) << text;
  }
  const fs::path b = dir_ / "b";
  auto r = run_command("TESSERA_TIMEOUT=20 TESSERA_TEST_KILL_IN_CHECKPOINT=1:10 " + bin +
                           " run --master-port 0 --max-restarts 1 -n 2 " + bin + " train --config " +
                           cfg + " --out " + b.string() + " 2>&1",
                       240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 killed in the save of step 10"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from " + b.string() + "/step_5"), std::string::npos) << r.output;
  const double worst = worst_loss_diff(dir_ / "a" / "metrics.jsonl", b / "metrics.jsonl", 20);
  std::printf("[train cli] async checkpoints, rank 1 killed while writing step 10 in the "
              "background, restarted, resumed from step 5: max |loss diff| vs the straight "
              "run %.3g\n", worst);
  EXPECT_EQ(worst, 0.0);
  EXPECT_EQ(read_text_file((b / "latest").string()), "step_20\n");
  // Background saves at steps 5, 10 and 15 (the retried 10 included) and a
  // synchronous final one, each with what it blocked; committed writes report
  // their duration.
  std::map<std::string, int> modes;
  int writes = 0;
  std::ifstream in(b / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("checkpoint_mode")) {
      ++modes[j["checkpoint_mode"].get<std::string>()];
      EXPECT_GE(j["checkpoint_blocking_s"].get<double>(), 0.0);
    }
    if (j.contains("checkpoint_write_s")) ++writes;
  }
  EXPECT_EQ(modes["sync"], 1) << "the last save must be synchronous";
  EXPECT_GE(modes["async"], 3);
  EXPECT_GE(writes, 2);
  for (int step : {5, 10, 15, 20}) {
    EXPECT_TRUE(fs::exists(b / ("step_" + std::to_string(step)) / "manifest.json")) << step;
  }
}

// Preemption: SIGTERM to the launcher mid-run. The launcher forwards it, every
// rank stops after the same step, a complete checkpoint of that step is
// written and `latest` names it, the job exits 143 (128 + SIGTERM), no process
// of it remains, and --resume continues from that step.
TEST_F(TrainCli, SigtermFinishesTheStepWritesACheckpointAndExits143) {
  const std::string cfg = write_config("preempt.json");
  const std::string bin = tessera_bin();
  const fs::path out = dir_ / "preempted";
  const std::string job = "TESSERA_TIMEOUT=20 " + bin + " run --master-port 0 -n 2 " + bin +
                          " train --config " + cfg + " --steps 400 --out " + out.string();
  // SIGTERM once step 5 is logged (steps_per_print 1).
  const fs::path log = dir_ / "preempt.log";
  auto r = run_command("(" + job + " > " + log.string() + " 2>&1 & pid=$!; for i in $(seq 1 6000); "
                           "do grep -qE '\"step\":5[,}]' " + (out / "metrics.jsonl").string() +
                           " 2>/dev/null && break; sleep 0.01; done; kill -TERM $pid; wait $pid; "
                           "echo \"exit $?\")",
                       180);
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(r.output.find("exit 143"), std::string::npos) << r.output << output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(output, m, std::regex("preempted \\(SIGTERM\\) after step (\\d+): "
                                                      "checkpoint [^ ]+ written")))
      << output;
  const std::string step = m[1];
  EXPECT_TRUE(fs::exists(out / ("step_" + step) / "manifest.json")) << output;
  EXPECT_LT(std::stoi(step), 400) << "stopped early, not at the end";
  EXPECT_EQ(count_processes(out.string()), 0) << "a process of the job outlived it";
  auto resumed = train("--config " + cfg + " --steps " + std::to_string(std::stoi(step) + 2) +
                       " --resume --out " + out.string(), 2);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + out.string() + "/step_" + step), std::string::npos)
      << resumed.output;
}

// ZeRO-Infinity: stage 3 with the optimizer state and the parameter shards in
// swap files; SIGKILL mid-step after the step-10 checkpoint, then --resume.
TEST_F(TrainCli, OffloadedToDiskKilledAndResumedLosesNothingButTheStepsAfterTheCheckpoint) {
  const fs::path nvme = dir_ / "nvme";
  fs::create_directories(nvme);
  const std::string cfg = write_config("offload.json", R"(, "zero_optimization": {"stage": 3,
      "stage3_param_persistence_threshold": 100,
      "offload_optimizer": {"device": "nvme", "nvme_path": ")" + nvme.string() + R"(",
                            "buffer_size": 8192, "buffer_count": 3},
      "offload_param": {"device": "nvme", "nvme_path": ")" + nvme.string() + R"("}})");
  const std::string bin = tessera_bin();
  auto straight = train("--config " + cfg + " --out " + (dir_ / "a").string(), 2);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  EXPECT_NE(straight.output.find("offload to " + nvme.string()), std::string::npos)
      << straight.output;
  const fs::path swap_root = nvme / "tessera-offload";
  EXPECT_FALSE(fs::exists(swap_root)) << "the swap files outlived a finished job";

  const fs::path b = dir_ / "b";
  const std::string job = "TESSERA_TIMEOUT=20 " + bin + " run --master-port 0 -n 2 " + bin +
                          " train --config " + cfg + " --out " + b.string();
  // Killed once step 11's loss is logged: in the middle of step 12.
  auto killed = run_and_kill_when(
      job, "grep -qE '\"step\":11[,}]' " + (b / "metrics.jsonl").string() + " 2>/dev/null",
      dir_ / "killed.log", b);
  ASSERT_NE(killed.output.find("killed"), std::string::npos) << killed.output;
  ASSERT_EQ(count_processes(b.string()), 0) << "workers outlived the killed launcher";
  ASSERT_TRUE(fs::exists(b / "step_10" / "manifest.json"));
  ASSERT_FALSE(fs::exists(b / "step_20")) << "the job finished before the kill; slow it down";
  ASSERT_TRUE(fs::exists(swap_root)) << "SIGKILL leaves the swap files (nothing can run)";

  auto resumed = train("--config " + cfg + " --resume --out " + b.string(), 2);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + b.string() + "/step_10"), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("left under " + nvme.string() + " by processes that no longer run"),
            std::string::npos) << resumed.output;
  EXPECT_FALSE(fs::exists(swap_root)) << "stale or own swap files are left";
  std::map<int64_t, double> a;
  const double worst = worst_loss_diff(dir_ / "a" / "metrics.jsonl", b / "metrics.jsonl", 20, &a);
  std::printf("[train cli] stage 3 offloaded to disk, 2 ranks, killed in step 12, resumed from "
              "step 10: max |loss diff| over 20 steps %.3g (loss %.4f -> %.4f)\n", worst, a[1],
              a[20]);
  EXPECT_EQ(worst, 0.0);
  EXPECT_LT(a[20], a[1]);
}

TEST_F(TrainCli, CorruptedCheckpointIsRefusedAndThePreviousOneResumes) {
  const std::string cfg = write_config("tiny.json");
  const fs::path out = dir_ / "c";
  auto first = train("--config " + cfg + " --out " + out.string(), 1);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(fs::exists(out / "step_10" / "manifest.json"));
  ASSERT_TRUE(fs::exists(out / "step_20" / "replicated.tsr"));
  // Flip one byte in the newest checkpoint's weights.
  {
    std::fstream f(out / "step_20" / "replicated.tsr", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-7, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    f.seekp(-7, std::ios::end);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  auto resumed = train("--config " + cfg + " --steps 22 --resume --out " + out.string(), 1);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("replicated.tsr"), std::string::npos)
      << "the skipped file is not named:\n" << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + out.string() + "/step_10"), std::string::npos)
      << resumed.output;
}

}  // namespace
}  // namespace tessera::testing

namespace tessera::testing {
namespace {

// fp16 through the CLI: an injected overflow (TESSERA_TEST_GRAD_OVERFLOW) is
// skipped, logged and counted in metrics.jsonl; overflowing forever ends with
// the documented error and a non-zero exit instead of training on.
TEST_F(TrainCli, Fp16OverflowIsSkippedCountedAndPersistentOverflowStops) {
  const std::string fp16 = write_config(
      "fp16.json", R"(, "fp16": {"enabled": true, "initial_scale_power": 8, "hysteresis": 1})");
  auto once = run_command("TESSERA_TEST_GRAD_OVERFLOW=3 TESSERA_TIMEOUT=20 " + tessera_bin() +
                              " train --config " + fp16 + " --steps 6 --out " +
                              (dir_ / "once").string() + " 2>&1",
                          120);
  ASSERT_EQ(once.exit_code, 0) << once.output;
  EXPECT_NE(once.output.find("step 3: fp16 gradient overflow, step skipped; loss scale now 128"),
            std::string::npos) << once.output;
  std::ifstream in(dir_ / "once" / "metrics.jsonl");
  std::map<int64_t, nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) rows[j["step"].get<int64_t>()] = j;
  }
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[2]["skipped_steps"], 0);
  EXPECT_EQ(rows[2]["loss_scale"], 256.0);
  EXPECT_EQ(rows[3]["skipped_steps"], 1);
  EXPECT_EQ(rows[6]["loss_scale"], 128.0);

  const std::string doomed = write_config(
      "doomed.json", R"(, "fp16": {"enabled": true, "initial_scale_power": 2, "hysteresis": 1,
                                   "loss_scale_window": 4})");
  auto forever = run_command("TESSERA_TEST_GRAD_OVERFLOW=all TESSERA_TIMEOUT=20 " + tessera_bin() +
                                 " run --master-port 0 -n 2 " + tessera_bin() + " train --config " +
                                 doomed + " --out " + (dir_ / "doomed").string() + " 2>&1",
                             120);
  EXPECT_NE(forever.exit_code, 0) << forever.output;
  EXPECT_NE(forever.output.find("overflowed (inf or nan) on 4 consecutive steps at the minimum "
                                "loss scale 1"),
            std::string::npos) << forever.output;
  EXPECT_EQ(forever.output.find("step 20"), std::string::npos) << "trained to the end";
}

}  // namespace
}  // namespace tessera::testing
