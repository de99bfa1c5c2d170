// `tessera run -n 2 tessera train --task dlrm` end to end: a DLRM with one
// row-wise, one column-wise, table-wise and data-parallel tables (the planner's
// choice under a small budget, plus forced shardings) learns the generated click
// data's hidden signal: the held-out AUC must pass kMinAuc, and the metrics file
// must hold the same AUC. Then a bad sharding name is a ConfigError before joining.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "testing/files.h"
#include "testing/subprocess.h"

namespace {

namespace fs = std::filesystem;
using tessera::testing::read_text_file;
using tessera::testing::run_command;
using tessera::testing::TempDir;
using tessera::testing::tessera_bin;

// Measured: held-out AUC 0.785 for this config in 8 s (the hidden model's own AUC
// on the same samples 0.857); the same model in PyTorch with its tables frozen
// reaches about 0.69, so passing needs the sharded tables to learn.
constexpr double kMinAuc = 0.75;

TEST(DlrmTrainCli, TwoRanksLearnTheHiddenClickModel) {
  TempDir tmp("dlrm_cli");
  const fs::path config = fs::path(tmp.path()) / "dlrm.json", out = fs::path(tmp.path()) / "out";
  std::ofstream(config) << R"({
    "train_batch_size": 512, "steps_per_print": 50, "seed": 7,
    "optimizer": {"type": "Adam", "params": {"lr": 0.002}},
    "model": {"type": "dlrm", "bottom_mlp": [32, 16], "top_mlp": [32, 16],
              "embedding": {"lr": 0.05, "budget_bytes_per_rank": 2500000,
                            "sharding": {"cat_1": "column_wise"}}},
    "data": {"samples": 90000, "held_out": 10000,
             "cardinalities": [50000, 10000, 2000, 500, 100, 20]},
    "train": {"steps": 300}})";
  const std::string bin = tessera_bin();
  const auto r = run_command("TESSERA_TIMEOUT=60 " + bin + " run --master-port 0 -n 2 " + bin +
                                 " train --task dlrm --config " + config.string() + " --out " +
                                 out.string() + " 2>&1",
                             240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The plan: the 50000-row table (3.4 MB) exceeds the 2.5 MB budget -> row-wise.
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(cat_0\s+50000\s+16\s+row_wise)")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(cat_1\s+10000\s+16\s+column_wise)")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(cat_2\s+2000\s+16\s+table_wise)")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(cat_5\s+20\s+16\s+data_parallel)")))
      << r.output;
  std::smatch m;
  const std::regex auc_line(
      R"(held-out AUC ([0-9.]+) \(([0-9]+) samples; )"
      R"(the hidden model's own AUC on them ([0-9.]+)\))");
  ASSERT_TRUE(std::regex_search(r.output, m, auc_line)) << r.output;
  const double auc = std::stod(m[1]), hidden = std::stod(m[3]);
  std::printf("held-out AUC %.4f (hidden model %.4f) in %.1f s\n", auc, hidden, r.seconds);
  EXPECT_GE(auc, kMinAuc) << r.output;
  EXPECT_LE(auc, hidden + 0.01) << "no model beats the hidden one by much: " << r.output;
  EXPECT_EQ(std::stoll(m[2]), 9728);  // 19 rounds of 2 x 256 held-out samples
  const std::string metrics = read_text_file((out / "metrics.jsonl").string());
  std::smatch logged;
  ASSERT_TRUE(std::regex_search(metrics, logged, std::regex(R"("auc":([0-9.e-]+))"))) << metrics;
  EXPECT_NEAR(std::stod(logged[1]), auc, 1e-4) << metrics;
}

TEST(DlrmTrainCli, BadShardingIsAConfigError) {
  TempDir tmp("dlrm_bad");
  const fs::path config = fs::path(tmp.path()) / "bad.json";
  std::ofstream(config) << R"({"train_batch_size": 64,
    "model": {"type": "dlrm", "embedding": {"sharding": {"cat_0": "diagonal"}}}})";
  const auto r = run_command(tessera_bin() + " train --config " + config.string() + " 2>&1", 60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("diagonal"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("row_wise"), std::string::npos) << r.output;
}

}  // namespace
