// `tessera run --hostfile` across hosts reached over real SSH: network-namespace
// hosts (testing/netns_hosts.h) each run Debian's sshd with a key made for the
// test, and the launcher runs on host 0, as on a cluster's head node. The job is
// the real `tessera train` of a tiny GPT.
//
//  - a worker SIGKILLed mid-run: every host's workers restart, resume from the
//    last checkpoint, and end with the straight run's losses and parameters;
//  - a host cut off (its link deleted) under --nnodes 2:3: the others notice
//    within the node timeout, re-form at 4 of 6 ranks, resume and finish;
//  - a host that joins a --nnodes 2:3 job late is admitted at the next round;
//  - restarts exhausted: the error file names the rank, host and signal;
//  - SIGTERM to the launcher: a complete checkpoint, exit 143, nothing left;
//  - a worker SIGKILLed in the middle of a checkpoint write: the previous
//    checkpoint stays `latest`, and the restart resumes from it;
//  - a checkpoint directory one host does not share fails the first save,
//    naming the hosts, with nothing committed;
//  - bad hostfiles, unreachable hosts, a wrong job token and a mismatched -n
//    fail before training, naming the line or the host.
// Needs root, iproute2 and openssh-server; skipped otherwise.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "testing/files.h"
#include "testing/netns_hosts.h"
#include "testing/subprocess.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kPort = 29400;

std::map<int64_t, nlohmann::json> metrics_by_step(const fs::path& path) {
  std::map<int64_t, nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto row = nlohmann::json::parse(line, nullptr, false);
    if (!row.is_discarded() && row.contains("step") && row.contains("loss")) {
      rows[row["step"].get<int64_t>()] = row;
    }
  }
  return rows;
}

std::map<int64_t, double> losses(const fs::path& path) {
  std::map<int64_t, double> out;
  for (const auto& [step, row] : metrics_by_step(path)) out[step] = row["loss"].get<double>();
  return out;
}

// The last validation loss in a metrics file; NaN when there is none.
double last_val_loss(const fs::path& path) {
  double val = std::nan("");
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto row = nlohmann::json::parse(line, nullptr, false);
    if (!row.is_discarded() && row.contains("val_loss")) val = row["val_loss"].get<double>();
  }
  return val;
}

// /dev/shm entries of Tessera whose creating process is gone.
std::set<std::string> orphan_segments() {
  std::set<std::string> out;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("tessera-", 0) != 0) continue;
    const int pid = std::atoi(name.c_str() + 8);
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) out.insert(name);
  }
  ::closedir(d);
  return out;
}

class SshLauncher : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = netns_skip_reason(true); !why.empty()) GTEST_SKIP() << why;
    std::ofstream text(dir_ / "corpus.txt");
    for (int i = 0; i < 400; ++i) text << "the quick brown fox " << i % 7 << " jumps over the lazy dog.\n";
  }

  // Namespace hosts with sshd; skips the test when namespaces cannot be made.
  // With private_host >= 0, that host sees its own empty disk at private_dir.
  bool start_hosts(int n, int private_host = -1, const fs::path& private_dir = {}) {
    hosts_ = std::make_unique<SshHosts>("tsss" + std::to_string(getpid()), n, dir_.string());
    if (private_host >= 0) hosts_->give_private_dir(private_host, private_dir.string());
    CommandResult r = hosts_->start();
    if (r.output.find("Operation not permitted") != std::string::npos) {
      hosts_.reset();
      return false;
    }
    EXPECT_EQ(r.exit_code, 0) << "could not start sshd in the namespaces:\n" << r.output;
    return r.exit_code == 0;
  }

  // `eval_interval` 0: no evaluation. `batch` > 0 fixes train_batch_size, so
  // that gradient accumulation absorbs a change of world size (48 samples:
  // 3 micro-batches of 4 on 4 ranks, 2 on 6) and a resumed data position splits
  // over either size.
  std::string write_config(const std::string& name, int steps, int checkpoint_interval,
                           int eval_interval = 0, int batch = 0) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << "{" << (batch > 0 ? "\"train_batch_size\": " + std::to_string(batch) + ", " : "")
                        << R"(
      "train_micro_batch_size_per_gpu": 4, "steps_per_print": 1, "seed": 5,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 2, "total_num_steps": )"
                        << steps << R"(}},
      "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 32, "dropout": 0.1},
      "data": {"path": ")" << (dir_ / "corpus.txt").string() << R"("},
      "train": {"steps": )" << steps << R"(, "eval_interval": )"
                        << (eval_interval > 0 ? eval_interval : 100000)
                        << R"(, "eval_iters": 8, "checkpoint_interval": )"
                        << checkpoint_interval << R"(, "sample_length": 0}})";
    return path;
  }

  // The launcher's command line, run on host 0: `tessera run` with the test's
  // ssh options, `run_flags`, then `tessera train --config CONFIG --out OUT`.
  std::string launcher(const std::string& env, const std::string& run_flags,
                       const std::string& config, const fs::path& out) const {
    const std::string bin = tessera_bin();
    return hosts_->on(0, "env TESSERA_TIMEOUT=20 " + env + " " + bin + " run " +
                             hosts_->ssh_flags() + " --master-port " + std::to_string(kPort) +
                             " --grace-period 2 " + run_flags + " " + bin + " train --config " +
                             config + " --out " + out.string());
  }

  // One agent started by hand on `host` over ssh (no hostfile launcher), named
  // by its address (hostnames do not differ between namespaces).
  std::string agent_over_ssh(int host, const std::string& token, const std::string& run_flags,
                             const std::string& config, const fs::path& out) const {
    const std::string bin = tessera_bin();
    return hosts_->on(0, hosts_->ssh_to(host) + " 'cd " + dir_.string() +
                             " && TESSERA_TIMEOUT=20 TESSERA_HOST_LABEL=" + NetnsHosts::address(host) +
                             " TESSERA_JOB_TOKEN=" + token + " " + bin +
                             " run --master-addr " + NetnsHosts::address(0) + " --master-port " +
                             std::to_string(kPort) + " --grace-period 2 " + run_flags + " " + bin +
                             " train --config " + config + " --out " + out.string() + "'");
  }

  // The largest |a - b| over every parameter of two checkpoints, through
  // `tessera ckpt consolidate` and torch.load.
  double worst_parameter_diff(const fs::path& a, const fs::path& b) {
    const std::string bin = tessera_bin();
    auto r = run_command(
        bin + " ckpt consolidate " + a.string() + " " + (dir_ / "a.pt").string() + " && " + bin +
            " ckpt consolidate " + b.string() + " " + (dir_ / "b.pt").string() +
            " && " + tessera::testing::python_bin() + " -c \"import torch; a=torch.load('" + (dir_ / "a.pt").string() +
            "', weights_only=False); b=torch.load('" + (dir_ / "b.pt").string() +
            "', weights_only=False); assert a.keys()==b.keys(); print('worst', max(float((a[k].double()-b[k].double())"
            ".abs().max()) for k in a))\" 2>&1",
        120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto at = r.output.find("worst ");
    return at == std::string::npos ? 1e9 : std::atof(r.output.c_str() + at + 6);
  }

  // Runs `command` in the background; once `condition` (a shell test) holds,
  // runs `then`; waits for `command` and prints "exit CODE", then waits for
  // whatever `then` started in the background.
  CommandResult run_and_act_when(const std::string& command, const fs::path& log,
                                 const std::string& condition, const std::string& then,
                                 double timeout = 300) {
    return run_command("(" + command + " > " + log.string() + " 2>&1 & pid=$!; " +
                           "for i in $(seq 1 12000); do " + condition +
                           " && break; kill -0 $pid 2>/dev/null || break; sleep 0.02; done; " +
                           then + "; wait $pid; echo \"exit $?\"; wait)",
                       timeout);
  }

  static int exit_of(const CommandResult& r) {
    const auto at = r.output.rfind("exit ");
    return at == std::string::npos ? -1 : std::atoi(r.output.c_str() + at + 5);
  }

  static std::string step_logged(const fs::path& out, int step) {
    return "grep -qE '\"step\":" + std::to_string(step) + "[,}]' " + (out / "metrics.jsonl").string() +
           " 2>/dev/null";
  }

  TempDir tmp_{"sshlaunch"};
  fs::path dir_{tmp_.path()};
  std::unique_ptr<SshHosts> hosts_;
};

TEST_F(SshLauncher, KilledWorkerRestartsEveryHostAndResumesToTheStraightRunsParameters) {
  if (!start_hosts(2)) GTEST_SKIP() << "cannot create network namespaces here";
  const std::string cfg = write_config("tiny.json", 20, 10);
  const std::string hostfile = hosts_->write_hostfile(2, 2);
  auto straight = run_command(launcher("", "--hostfile " + hostfile, cfg, dir_ / "a") + " 2>&1", 300);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  // Workers' lines carry their host and rank, agents' their host.
  EXPECT_NE(straight.output.find("[10.200.0.1:0] "), std::string::npos) << straight.output;
  EXPECT_NE(straight.output.find("[10.200.0.2] tessera run: round 0: 10.200.0.2 is node 1 of 2"),
            std::string::npos)
      << straight.output;

  const fs::path b = dir_ / "b";
  auto killed = run_command(launcher("TESSERA_TEST_KILL_AT_STEP=3:13",
                                     "--hostfile " + hostfile + " --max-restarts 3", cfg, b) +
                                " 2>&1",
                            300);
  std::printf("[ssh launcher] 2 hosts x 2 ranks, rank 3 killed at step 13: %.1f s\n",
              killed.seconds);
  ASSERT_EQ(killed.exit_code, 0) << killed.output;
  EXPECT_NE(killed.output.find("rank 3 on 10.200.0.2 "), std::string::npos) << killed.output;
  EXPECT_NE(killed.output.find("restarting all workers (restart 1 of 3)"), std::string::npos)
      << killed.output;
  EXPECT_NE(killed.output.find("resumed from " + b.string() + "/step_10"), std::string::npos)
      << killed.output;
  auto la = losses(dir_ / "a" / "metrics.jsonl");
  auto lb = losses(b / "metrics.jsonl");
  ASSERT_EQ(la.size(), 20u);
  ASSERT_EQ(lb.size(), 20u);
  double worst_loss = 0;
  for (auto& [step, loss] : la) worst_loss = std::max(worst_loss, std::abs(loss - lb[step]));
  const double worst_param = worst_parameter_diff(dir_ / "a" / "step_20", b / "step_20");
  std::printf("[ssh launcher] straight vs killed+resumed: max |loss diff| %.3g, max |param diff| "
              "%.3g\n", worst_loss, worst_param);
  EXPECT_LE(worst_loss, 1e-6);
  EXPECT_LE(worst_param, 1e-6);
  EXPECT_EQ(count_processes(b.string()), 0) << "processes of the job remain";
}

TEST_F(SshLauncher, LostHostTheOthersReformAtTheSmallerSizeAndFinish) {
  if (!start_hosts(3)) GTEST_SKIP() << "cannot create network namespaces here";
  const int steps = 200;
  // Without dropout the two runs differ only in the steps redone after the
  // loss and in the order of reductions, so "within 2%" measures the restart.
  std::string cfg = write_config("lost.json", steps, 25, steps, 48);
  {
    std::string text = read_text_file(cfg);
    text.replace(text.find("\"dropout\": 0.1"), 14, "\"dropout\": 0.0");
    std::ofstream(cfg) << text;
  }
  const fs::path out = dir_ / "elastic";
  const std::string flags = "--hostfile " + hosts_->write_hostfile(3, 2) +
                            " --nnodes 2:3 --max-restarts 2 --node-timeout 3 "
                            "--monitor-interval 0.5";
  // Host 2 is cut off after step 40 (the step-25 checkpoint is committed).
  auto r = run_and_act_when(launcher("", flags, cfg, out), dir_ / "lost.log", step_logged(out, 40),
                            "ip -n " + hosts_->prefix() + "-sw link del v2");
  const std::string log = read_text_file((dir_ / "lost.log").string());
  std::printf("[ssh launcher] --nnodes 2:3, host 2 unplugged after step 40: %.1f s\n", r.seconds);
  ASSERT_EQ(exit_of(r), 0) << r.output << log;
  EXPECT_NE(log.find("(10.200.0.3) sent no heartbeat"), std::string::npos) << log;
  EXPECT_NE(log.find("of 2 (10.200.0.1, 10.200.0.2), ranks 0..1 of 4"), std::string::npos) << log;
  EXPECT_NE(log.find("resumed from " + out.string() + "/step_"), std::string::npos) << log;
  auto elastic = losses(out / "metrics.jsonl");
  ASSERT_EQ(elastic.count(steps), 1u) << log;

  // A clean run at the size the job ended with.
  const fs::path clean = dir_ / "clean";
  auto c = run_command(launcher("", "--hostfile " + hosts_->write_hostfile(2, 2, "two"), cfg, clean) +
                           " 2>&1",
                       300);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  auto reference = losses(clean / "metrics.jsonl");
  ASSERT_EQ(reference.count(steps), 1u) << c.output;
  // The final validation loss (the same 8 held-out batches for both runs): a
  // single training batch's loss is too noisy to compare.
  const double val_elastic = last_val_loss(out / "metrics.jsonl");
  const double val_clean = last_val_loss(clean / "metrics.jsonl");
  std::printf("[ssh launcher] final validation loss: elastic %.4f, clean run at 4 ranks %.4f "
              "(%.2f%%)\n", val_elastic, val_clean,
              100 * std::abs(val_elastic - val_clean) / val_clean);
  EXPECT_LE(std::abs(val_elastic - val_clean), 0.02 * val_clean);
  EXPECT_EQ(count_processes(out.string()), 0) << "processes of the job remain";
}

TEST_F(SshLauncher, AHostThatJoinsLateIsAdmittedAtTheNextRound) {
  if (!start_hosts(3)) GTEST_SKIP() << "cannot create network namespaces here";
  const std::string cfg = write_config("late.json", 300, 50, 0, 48);
  const fs::path out = dir_ / "late";
  const std::string flags = "--nnodes 2:3 -n 2 --last-call-timeout 1 --max-restarts 0 --rdzv-id late";
  std::string both;
  for (int node = 0; node < 2; ++node) {
    both += agent_over_ssh(node, "latetoken", flags + " --node-rank " + std::to_string(node), cfg,
                           out) +
            " > " + (dir_ / ("node" + std::to_string(node) + ".log")).string() + " 2>&1 & p" +
            std::to_string(node) + "=$!; ";
  }
  both = "{ " + both + "wait $p0; e0=$?; wait $p1; echo \"early $e0 $?\"; }";
  auto r = run_and_act_when(both, dir_ / "early.log", step_logged(out, 5),
                            agent_over_ssh(2, "latetoken", flags + " --node-rank 1", cfg, out) +
                                " > " + (dir_ / "node2.log").string() + " 2>&1 & p2=$!");
  const std::string logs = read_text_file((dir_ / "node0.log").string()) + "--- node 1\n" +
                           read_text_file((dir_ / "node1.log").string()) + "--- late host\n" +
                           read_text_file((dir_ / "node2.log").string());
  const std::string early = read_text_file((dir_ / "early.log").string());
  EXPECT_NE(early.find("early 0 0"), std::string::npos) << early << logs;
  EXPECT_NE(logs.find("waiting for the next round"), std::string::npos) << logs;
  EXPECT_NE(logs.find("a node is waiting to join"), std::string::npos) << logs;
  EXPECT_TRUE(std::regex_search(logs, std::regex("round 1: 10\\.200\\.0\\.3 is node [12] of 3 .*of 6")))
      << logs;
  EXPECT_EQ(losses(out / "metrics.jsonl").count(300), 1u) << logs;
  EXPECT_NE(logs.find("resumed from " + out.string() + "/step_"), std::string::npos) << logs;
  EXPECT_EQ(count_processes(out.string()), 0) << "processes of the job remain";
}

TEST_F(SshLauncher, RestartsExhaustedTheErrorFileNamesRankHostAndSignal) {
  if (!start_hosts(2)) GTEST_SKIP() << "cannot create network namespaces here";
  const std::string cfg = write_config("fail.json", 20, 10);
  const fs::path error_file = dir_ / "error.json";
  auto r = run_command(launcher("TESSERA_TEST_KILL_AT_STEP=3:5",
                                "--hostfile " + hosts_->write_hostfile(2, 2) +
                                    " --max-restarts 0 --error-file " + error_file.string(),
                                cfg, dir_ / "fail") +
                           " 2>&1",
                       300);
  EXPECT_NE(r.exit_code, 0) << r.output;
  const std::string text = read_text_file(error_file.string());
  ASSERT_FALSE(text.empty()) << r.output;
  auto j = nlohmann::json::parse(text);
  const auto& info = j["message"]["extraInfo"];
  EXPECT_EQ(info["rank"], 3) << text;
  EXPECT_EQ(info["hostname"], "10.200.0.2") << text;
  EXPECT_EQ(info["signal"], "SIGKILL") << text;
  EXPECT_EQ(info["exitcode"], -9) << text;
  EXPECT_NE(r.output.find("rank 3 on 10.200.0.2 was killed by SIGKILL"), std::string::npos)
      << r.output;
  EXPECT_EQ(count_processes((dir_ / "fail").string()), 0) << "processes of the job remain";
}

TEST_F(SshLauncher, SigtermCheckpointsOnEveryHostExits143AndLeavesNothing) {
  if (!start_hosts(2)) GTEST_SKIP() << "cannot create network namespaces here";
  const std::string cfg = write_config("preempt.json", 400, 100);
  const fs::path out = dir_ / "preempt";
  const std::set<std::string> before = orphan_segments();
  auto r = run_and_act_when(launcher("", "--hostfile " + hosts_->write_hostfile(2, 2), cfg, out),
                            dir_ / "preempt.log", step_logged(out, 5), "kill -TERM $pid");
  const std::string log = read_text_file((dir_ / "preempt.log").string());
  EXPECT_EQ(exit_of(r), 143) << r.output << log;
  ASSERT_TRUE(fs::exists(out / "latest")) << log;
  const std::string latest = read_text_file((out / "latest").string());
  EXPECT_TRUE(fs::exists(out / latest.substr(0, latest.find_last_not_of("\n ") + 1) /
                         "manifest.json"))
      << "latest names '" << latest << "'\n" << log;
  EXPECT_EQ(count_processes(out.string()), 0) << "processes of the job remain";
  for (const auto& s : orphan_segments()) {
    EXPECT_EQ(before.count(s), 1u) << "shared-memory segment left behind: " << s;
  }
}

TEST_F(SshLauncher, KillInACheckpointWriteKeepsThePreviousOneLatestAndTheRestartResumesFromIt) {
  if (!start_hosts(2)) GTEST_SKIP() << "cannot create network namespaces here";
  const std::string cfg = write_config("ckptkill.json", 20, 10);
  const std::string hostfile = hosts_->write_hostfile(2, 2);
  // Rank 3 (on the second host) dies once its part of step 20 is on disk,
  // before rank 0 commits it; no restarts, so the directory stays as it was.
  const fs::path a = dir_ / "a";
  auto r = run_command(launcher("TESSERA_TEST_KILL_IN_CHECKPOINT=3:20", "--hostfile " + hostfile,
                                cfg, a) + " 2>&1",
                       300);
  ASSERT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 3 killed in the save of step 20"), std::string::npos) << r.output;
  EXPECT_EQ(read_text_file((a / "latest").string()), "step_10\n");
  EXPECT_TRUE(fs::exists(a / "step_20" / "rank_00003.tsr")) << "the kill came before the write";
  EXPECT_FALSE(fs::exists(a / "step_20" / "manifest.json")) << "a partial step was committed";
  auto info = run_command(tessera_bin() + " ckpt info " + a.string() + " --verify 2>&1", 60);
  EXPECT_EQ(info.exit_code, 0) << info.output;
  EXPECT_TRUE(std::regex_search(info.output, std::regex("step +10\n"))) << info.output;

  // Rank 0, the one that commits, dies in the same place; the launcher restarts
  // every host's workers, and they resume from step 10.
  const fs::path b = dir_ / "b";
  auto restarted = run_command(launcher("TESSERA_TEST_KILL_IN_CHECKPOINT=0:20",
                                        "--hostfile " + hostfile + " --max-restarts 1", cfg, b) +
                                   " 2>&1",
                               300);
  std::printf("[ssh launcher] rank 0 killed in the save of step 20, restarted: %.1f s\n",
              restarted.seconds);
  ASSERT_EQ(restarted.exit_code, 0) << restarted.output;
  EXPECT_NE(restarted.output.find("rank 0 killed in the save of step 20"), std::string::npos)
      << restarted.output;
  EXPECT_NE(restarted.output.find("resumed from " + b.string() + "/step_10"), std::string::npos)
      << restarted.output;
  EXPECT_EQ(read_text_file((b / "latest").string()), "step_20\n");
  EXPECT_EQ(losses(b / "metrics.jsonl").size(), 20u);
}

TEST_F(SshLauncher, ACheckpointDirectoryTheHostsDoNotShareFailsTheFirstSave) {
  const fs::path out = dir_ / "local";
  fs::create_directories(out);
  // The second host sees its own empty disk at `out`, as without a shared filesystem.
  if (!start_hosts(2, 1, out)) GTEST_SKIP() << "cannot create network namespaces here";
  const std::string cfg = write_config("notshared.json", 20, 10);
  auto r = run_command(launcher("", "--hostfile " + hosts_->write_hostfile(2, 2), cfg, out) +
                           " 2>&1",
                       300);
  ASSERT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the checkpoint directory " + out.string() +
                          " is not shared between the job's hosts: rank 2 on 10.200.0.2, rank 3 "
                          "on 10.200.0.2 cannot see the file rank 0 on 10.200.0.1 wrote there"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out / "latest")) << "a checkpoint was committed";
  EXPECT_FALSE(fs::exists(out / "step_10")) << "the save began";
  EXPECT_EQ(count_processes(out.string()), 0) << "processes of the job remain";
}

TEST_F(SshLauncher, MistakesFailBeforeTrainingNamingTheLineOrTheHost) {
  if (!start_hosts(2)) GTEST_SKIP() << "cannot create network namespaces here";
  const std::string cfg = write_config("mistakes.json", 20, 10);
  const std::string bad = (dir_ / "bad_hostfile").string();
  std::ofstream(bad) << "10.200.0.1 slots=2\n10.200.0.2 slot=2\n";
  auto r = run_command(launcher("", "--hostfile " + bad, cfg, dir_ / "m1") + " 2>&1", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(bad + ":2: expected 'HOST slots=N' or 'HOST:N'"), std::string::npos)
      << r.output;

  const std::string unreachable = (dir_ / "unreachable").string();
  std::ofstream(unreachable) << "10.200.0.1 slots=2\n10.200.0.9 slots=2\n";
  r = run_command(launcher("", "--hostfile " + unreachable, cfg, dir_ / "m2") + " 2>&1", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cannot reach every host over ssh"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("10.200.0.9: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("round 0"), std::string::npos) << "started anyway:\n" << r.output;

  // Agents started by hand: a wrong token, then a mismatched -n.
  auto pair = [&](const std::string& token1, const std::string& n1, const std::string& tag) {
    std::string cmd;
    for (int node = 0; node < 2; ++node) {
      cmd += agent_over_ssh(node, node == 0 ? "right" : token1,
                            "--nnodes 2 --join-timeout 8 --node-rank " + std::to_string(node) +
                                " -n " + (node == 0 ? "2" : n1),
                            cfg, dir_ / tag) +
             " > " + (dir_ / (tag + std::to_string(node))).string() + " 2>&1 & p" +
             std::to_string(node) + "=$!; ";
    }
    auto res = run_command(cmd + "wait $p0; e0=$?; wait $p1; echo \"exits $e0 $?\"", 60);
    return res.output + read_text_file((dir_ / (tag + "0")).string()) + "--- node 1\n" +
           read_text_file((dir_ / (tag + "1")).string());
  };
  std::string out = pair("wrong", "2", "token");
  EXPECT_EQ(out.find("exits 0"), std::string::npos) << out;
  EXPECT_NE(out.find("wrong job token"), std::string::npos) << out;
  EXPECT_NE(out.find("from 10.200.0.2"), std::string::npos) << out;
  EXPECT_EQ(out.find("| loss"), std::string::npos) << "trained anyway:\n" << out;
  out = pair("right", "1", "nproc");
  EXPECT_EQ(out.find("exits 0"), std::string::npos) << out;
  EXPECT_NE(out.find("host 10.200.0.2 starts 1 workers (-n) but node 0"), std::string::npos) << out;
  EXPECT_EQ(out.find("| loss"), std::string::npos) << "trained anyway:\n" << out;
}

}  // namespace
}  // namespace tessera::testing
