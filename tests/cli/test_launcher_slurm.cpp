// Tessera under a real Slurm: a one-node cluster (Debian's munged, slurmctld and
// slurmd, configured in a temp directory by scripts/slurm-test-cluster.sh) runs
//  - `srun -n 2 tessera train --steps 50` (the default model): ranks, store and
//    local world size from SLURM_*; 50 steps train and a checkpoint of both
//    ranks is committed;
//  - the ready sbatch script examples/slurm/train.sbatch, submitted with sbatch;
//  - `tessera run --launcher slurm` in an allocation: an agent started by srun
//    restarts its workers after one is killed, resuming from the last checkpoint;
//  - scancel --signal=TERM on that job (Slurm signals every process of the step,
//    agent and workers alike, and the agent forwards its own copy): a
//    checkpoint, exit 143, no process left;
//  - `tessera run --launcher slurm` outside an allocation: a clear error;
// and a two-node cluster whose nodes are network-namespace hosts (one slurmd in
// each), where
//  - `srun -N 2 -n 4` trains across both nodes, loss for loss as the same job
//    on one host;
//  - `tessera run --launcher slurm` runs an agent per node and, after a worker
//    on node 1 is killed, restarts both nodes' workers from the last checkpoint.
// Needs root and slurmctld, slurmd, munge; skipped otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "testing/files.h"
#include "testing/netns_hosts.h"
#include "testing/subprocess.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

std::string source_dir() {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  return src ? src : ".";
}

std::string slurm_skip_reason() {
  if (geteuid() != 0) return "needs root to start slurmctld and slurmd";
  if (run_command("command -v slurmctld && command -v slurmd && command -v munged && "
                  "command -v srun && command -v sbatch",
                  5)
          .exit_code != 0) {
    return "needs slurmctld, slurmd, slurm-client and munge (scripts/install-deps.sh)";
  }
  return "";
}

class SlurmCluster : public ::testing::Test {
 protected:
  void TearDown() override {
    if (started_) run_command(script("stop"), 60);
    hosts_.reset();  // after the daemons inside them are gone
  }

  // One node on loopback, or `nodes` (>= 2) namespace hosts with a slurmd each.
  bool start(int nodes = 0) {
    if (!slurm_skip_reason().empty()) return false;
    if (nodes >= 2) {
      if (!netns_skip_reason(false).empty()) return false;
      hosts_ = std::make_unique<NetnsHosts>("tslurm", nodes);
      auto up = hosts_->up();
      EXPECT_EQ(up.exit_code, 0) << up.output;
      if (up.exit_code != 0) return false;
    }
    nodes_ = nodes;
    auto r = run_command(script("start") + " " + std::to_string(nodes) + " 2>&1", 60);
    started_ = true;
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0;
  }

  std::string script(const std::string& verb) const {
    return "TESSERA_NETNS_PREFIX=tslurm " + source_dir() + "/scripts/slurm-test-cluster.sh " +
           verb + " " + (dir_ / "cluster").string();
  }

  // `command` with the cluster's clients configured, run in the test directory
  // (on node 0 of a multi-node cluster: it must start with a program, not with
  // variable assignments).
  std::string in_cluster(const std::string& command) const {
    return "cd " + dir_.string() + " && SLURM_CONF=" + (dir_ / "cluster" / "slurm.conf").string() +
           " TESSERA_TIMEOUT=60 " + (nodes_ >= 2 ? script("on") + " 0 " : "") + command;
  }

  // The loss of each logged step in `metrics`.
  static std::map<int, double> losses(const fs::path& metrics) {
    std::map<int, double> out;
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) {
      auto row = nlohmann::json::parse(line, nullptr, false);
      if (!row.is_discarded() && row.contains("step") && row.contains("loss")) {
        out[row["step"].get<int>()] = row["loss"].get<double>();
      }
    }
    return out;
  }

  // A tiny GPT on a small text, checkpoints every `interval` steps.
  std::string write_config(int steps, int interval) const {
    const fs::path corpus = dir_ / "corpus.txt";
    std::ofstream text(corpus);
    for (int i = 0; i < 400; ++i) text << "the quick brown fox " << i % 7 << " jumps.\n";
    const fs::path path = dir_ / ("tiny_" + std::to_string(steps) + ".json");
    std::ofstream(path) << R"({"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1, "seed": 7,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.0},
      "data": {"path": ")" << corpus.string() << R"("},
      "train": {"steps": )" << steps << R"(, "eval_interval": 100000, "eval_iters": 4,
                "checkpoint_interval": )" << interval << R"(, "sample_length": 0}})";
    return path.string();
  }

  static int metric_rows(const fs::path& metrics) {
    std::ifstream in(metrics);
    int rows = 0;
    for (std::string line; std::getline(in, line);) {
      auto row = nlohmann::json::parse(line, nullptr, false);
      if (!row.is_discarded() && row.contains("step") && row.contains("loss")) ++rows;
    }
    return rows;
  }

  // The manifest `latest` names under `out` (null when there is none).
  static nlohmann::json latest_manifest(const fs::path& out) {
    std::ifstream latest(out / "latest");
    std::string step;
    if (!std::getline(latest, step)) return nullptr;
    std::ifstream m(out / step / "manifest.json");
    if (!m) return nullptr;
    return nlohmann::json::parse(m, nullptr, false);
  }

  // A 20-step job with checkpoints every 10 steps whose worker was killed at step
  // 13: one restart, resumed from step_10, a committed step_20 of `world` ranks.
  static void expect_restarted_and_resumed(const CommandResult& r, const fs::path& out,
                                           int world) {
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("restarting all workers (restart 1 of 1)"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("resumed from " + out.string() + "/step_10"), std::string::npos)
        << r.output;
    const auto manifest = latest_manifest(out);
    ASSERT_TRUE(manifest.is_object()) << r.output;
    EXPECT_EQ(manifest["step"], 20);
    EXPECT_EQ(manifest["world_size"], world);
  }

  TempDir tmp_{"slurm"};
  fs::path dir_{tmp_.path()};
  bool started_ = false;
  int nodes_ = 0;
  std::unique_ptr<NetnsHosts> hosts_;
};

std::string two_host_skip_reason() {
  std::string why = slurm_skip_reason();
  return why.empty() ? netns_skip_reason(false) : why;
}

TEST_F(SlurmCluster, SrunStartsOneTaskPerRankThatTrainAndCheckpoint) {
  if (!start()) GTEST_SKIP() << slurm_skip_reason();
  const fs::path out = dir_ / "srun";
  // The default model and config, as a user would first try it.
  auto r = run_command(in_cluster("TESSERA_JOB_TOKEN=srun-test srun -n 2 " + tessera_bin() +
                                  " train --steps 50 --out " + out.string() + " 2>&1"),
                       400);
  std::printf("[slurm] srun -n 2 tessera train --steps 50: %.1f s\n", r.seconds);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(metric_rows(out / "metrics.jsonl"), 5);  // the default config logs every 10 steps
  const auto manifest = latest_manifest(out);
  ASSERT_TRUE(manifest.is_object()) << "no committed checkpoint in " << out;
  EXPECT_EQ(manifest["step"], 50);
  EXPECT_EQ(manifest["world_size"], 2);  // both tasks joined one job
}

TEST_F(SlurmCluster, TheSbatchExampleRuns) {
  if (!start()) GTEST_SKIP() << slurm_skip_reason();
  const fs::path out = dir_ / "sbatch";
  auto r = run_command(in_cluster("TESSERA=" + tessera_bin() + " STEPS=30 OUT=" + out.string() +
                                  " CONFIG=" + write_config(30, 10) +
                                  " sbatch --wait --output=" + (dir_ / "job.out").string() + " " +
                                  source_dir() + "/examples/slurm/train.sbatch 2>&1"),
                       300);
  const std::string log = read_text_file((dir_ / "job.out").string());
  std::printf("[slurm] sbatch examples/slurm/train.sbatch, 30 steps: %.1f s\n", r.seconds);
  ASSERT_EQ(r.exit_code, 0) << r.output << log;
  EXPECT_EQ(metric_rows(out / "metrics.jsonl"), 30) << log;
  const auto manifest = latest_manifest(out);
  ASSERT_TRUE(manifest.is_object()) << log;
  EXPECT_EQ(manifest["step"], 30);
  EXPECT_EQ(manifest["world_size"], 2);
}

TEST_F(SlurmCluster, LauncherSlurmRestartsTheWorkersAndResumes) {
  if (!start()) GTEST_SKIP() << slurm_skip_reason();
  const fs::path out = dir_ / "agent";
  // salloc holds the allocation; inside it the launcher starts its agent with srun.
  auto r = run_command(in_cluster("TESSERA_TEST_KILL_AT_STEP=1:13 salloc --nodes=1 --ntasks=1 "
                                  "--cpus-per-task=2 " + tessera_bin() +
                                  " run --launcher slurm -n 2 --max-restarts 1 --grace-period 2 " +
                                  tessera_bin() + " train --config " + write_config(20, 10) +
                                  " --out " + out.string() + " 2>&1"),
                       300);
  std::printf("[slurm] tessera run --launcher slurm, rank 1 killed at step 13: %.1f s\n",
              r.seconds);
  expect_restarted_and_resumed(r, out, 2);
}

TEST_F(SlurmCluster, ScancelTermCheckpointsAndExits143) {
  if (!start()) GTEST_SKIP() << slurm_skip_reason();
  const fs::path out = dir_ / "scancel";
  const fs::path log = dir_ / "scancel.log";
  const std::string job = in_cluster("salloc --nodes=1 --ntasks=1 --cpus-per-task=2 " +
                                     tessera_bin() + " run --launcher slurm -n 2 --grace-period 10 " +
                                     tessera_bin() + " train --config " + write_config(100000, 0) +
                                     " --out " + out.string());
  const std::string started = "grep -qE '\"step\":5[,}]' " + (out / "metrics.jsonl").string() +
                              " 2>/dev/null";
  auto r = run_command("(" + job + " > " + log.string() + " 2>&1 & pid=$!; " +
                           "for i in $(seq 1 3000); do " + started +
                           " && break; sleep 0.02; done; " +
                           in_cluster("sh -c 'scancel --signal=TERM $(squeue -h -o %i)'") +
                           "; wait $pid; echo \"exit $?\")",
                       300);
  const std::string output = read_text_file(log.string());
  EXPECT_NE(r.output.find("exit 143"), std::string::npos) << r.output << output;
  EXPECT_NE(output.find("preempted (SIGTERM) after step"), std::string::npos) << output;
  const auto manifest = latest_manifest(out);
  ASSERT_TRUE(manifest.is_object()) << output;
  EXPECT_GE(manifest["step"].get<int>(), 5);
  EXPECT_EQ(count_processes(out.string()), 0) << "processes of the job remain";
}

TEST_F(SlurmCluster, LauncherSlurmOutsideAnAllocationSaysSo) {
  if (!slurm_skip_reason().empty()) GTEST_SKIP() << slurm_skip_reason();
  auto r = run_command("env -u SLURM_JOB_ID " + tessera_bin() + " run --launcher slurm -n 2 true 2>&1",
                       60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("SLURM_JOB_ID is not set; run it inside an allocation"),
            std::string::npos)
      << r.output;
}

// Node 0's store is found by name (the first node of SLURM_STEP_NODELIST) and
// gloo binds the address routed toward it: were either loopback, the ranks on
// node1 could not connect. The same job on one host gives the same losses.
TEST_F(SlurmCluster, SrunTrainsFourRanksOnTwoNodes) {
  if (!start(2)) GTEST_SKIP() << two_host_skip_reason();
  const std::string config = write_config(20, 10);
  const fs::path out = dir_ / "two_nodes";
  auto r = run_command(in_cluster("env TESSERA_JOB_TOKEN=two-nodes srun -N 2 -n 4 "
                                  "--ntasks-per-node=2 --kill-on-bad-exit=1 " + tessera_bin() +
                                  " train --config " + config + " --out " + out.string() + " 2>&1"),
                       300);
  std::printf("[slurm] srun -N 2 -n 4 tessera train, 20 steps: %.1f s\n", r.seconds);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto manifest = latest_manifest(out);
  ASSERT_TRUE(manifest.is_object()) << r.output;
  EXPECT_EQ(manifest["step"], 20);
  EXPECT_EQ(manifest["world_size"], 4);

  const fs::path ref = dir_ / "one_host";
  auto local = run_command(tessera_bin() + " run -n 4 " + tessera_bin() + " train --config " +
                               config + " --out " + ref.string() + " 2>&1",
                           300);
  ASSERT_EQ(local.exit_code, 0) << local.output;
  const auto expected = losses(ref / "metrics.jsonl");
  const auto got = losses(out / "metrics.jsonl");
  ASSERT_EQ(got.size(), 20u);
  ASSERT_EQ(expected.size(), 20u);
  double worst = 0;
  for (const auto& [step, loss] : expected) worst = std::max(worst, std::abs(got.at(step) - loss));
  std::printf("[slurm] max |loss difference| against one host over 20 steps: %.3g\n", worst);
  EXPECT_LE(worst, 1e-4);
}

TEST_F(SlurmCluster, LauncherSlurmOnTwoNodesRestartsBothAndResumes) {
  if (!start(2)) GTEST_SKIP() << two_host_skip_reason();
  const fs::path out = dir_ / "agents";
  // Rank 3 is on node1: both nodes' workers must stop and start again.
  auto r = run_command(in_cluster("env TESSERA_TEST_KILL_AT_STEP=3:13 salloc --nodes=2 "
                                  "--ntasks-per-node=1 " + tessera_bin() +
                                  " run --launcher slurm -n 2 --max-restarts 1 --grace-period 2 " +
                                  tessera_bin() + " train --config " + write_config(20, 10) +
                                  " --out " + out.string() + " 2>&1"),
                       300);
  std::printf("[slurm] tessera run --launcher slurm on 2 nodes, rank 3 killed at step 13: %.1f s\n",
              r.seconds);
  expect_restarted_and_resumed(r, out, 4);
  EXPECT_EQ(count_processes(out.string()), 0) << "processes of the job remain";
}

}  // namespace
}  // namespace tessera::testing
