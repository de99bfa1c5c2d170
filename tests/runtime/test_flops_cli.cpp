// FLOPs and MFU through the real binaries: `tessera doctor` measures and records
// the peak, `tessera train` reads it and reports TFLOP/s and MFU per progress
// line, in metrics.jsonl and in a summary, says how to get a peak when there
// is none, and prints the flops profiler's table at profile_step.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "testing/files.h"
#include "testing/subprocess.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

class FlopsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream text(dir_ / "corpus.txt");
    for (int i = 0; i < 200; ++i) text << "a small corpus for a small model, line " << i << ".\n";
    fs::create_directories(dir_ / "cache");
  }

  // Three steps of a tiny GPT writing to dir_/out; `extra` (a JSON object)
  // is merged into the top level.
  std::string config(const std::string& extra = "{}", const std::string& out = "out") {
    auto j = nlohmann::json::parse(R"({
      "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
      "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16},
      "train": {"steps": 3, "eval_interval": 0, "eval_iters": 1, "checkpoint_interval": 0,
                "sample_length": 0}})");
    j["data"]["path"] = (dir_ / "corpus.txt").string();
    j["train"]["out_dir"] = (dir_ / out).string();
    j.merge_patch(nlohmann::json::parse(extra));
    const std::string path = (dir_ / "gpt.json").string();
    std::ofstream(path) << j.dump();
    return path;
  }

  // The tool with a private cache directory and no peak override.
  CommandResult tessera(const std::string& args, const std::string& env = "") {
    return run_command("env -u TESSERA_PEAK_FLOPS XDG_CACHE_HOME=" + (dir_ / "cache").string() +
                           " TESSERA_TIMEOUT=20 " + env + " " + tessera_bin() + " " + args +
                           " 2>&1",
                       60);
  }

  std::vector<nlohmann::json> step_records() {
    std::vector<nlohmann::json> rows;
    std::ifstream in(dir_ / "out" / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) rows.push_back(j);
    }
    return rows;
  }

  TempDir tmp_{"flops_cli"};
  fs::path dir_{tmp_.path()};
};

TEST_F(FlopsCli, WithoutAPeakTrainSaysHowToMeasureOneAndReportsFlops) {
  auto r = tessera("train --config " + config());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("run `tessera doctor` once"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("TFLOP/s"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("MFU "), std::string::npos) << r.output;
  const auto rows = step_records();
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows) {
    EXPECT_GT(row.at("tflops").get<double>(), 0) << row.dump();
    EXPECT_FALSE(row.contains("mfu")) << row.dump();
  }
}

TEST_F(FlopsCli, DoctorRecordsThePeakAndTrainReportsMfuAgainstIt) {
  auto doctor = tessera("doctor");
  ASSERT_EQ(doctor.exit_code, 0) << doctor.output;
  const fs::path record = dir_ / "cache" / "tessera" / "peak.json";
  ASSERT_TRUE(fs::exists(record)) << doctor.output;
  const auto peak = nlohmann::json::parse(read_text_file(record.string()));
  const double per_core = peak.at("fp32_gemm_flops_per_core").get<double>();
  EXPECT_GT(per_core, 1e8) << peak.dump();
  EXPECT_EQ(peak.at("gemm_size").get<int>(), 1024);

  auto r = tessera("train --config " + config());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("from " + record.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| MFU "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("FLOPs: 3 steps in"), std::string::npos) << r.output;
  for (const auto& row : step_records()) {
    const double mfu = row.at("mfu").get<double>();
    // One thread per rank: MFU is achieved / the per-core peak.
    EXPECT_NEAR(mfu, row.at("tflops").get<double>() * 1e12 / per_core, 1e-9 + 1e-6 * mfu);
    EXPECT_GT(mfu, 0);
    EXPECT_LT(mfu, 1.5) << "faster than the measured peak?";
  }
}

TEST_F(FlopsCli, ActivationCheckpointingAddsHfuWithTheRecomputedForward) {
  auto r = tessera("train --config " + config(R"({"activation_checkpointing": {}})"),
                   "TESSERA_PEAK_FLOPS=5e10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(HFU "), std::string::npos) << r.output;
  // Per token, V 256, C 32, L 2, T 16: Psi = 2 * (12 C^2 + 13 C) + 2 C + V C = 33664,
  // model 6 Psi + 12 L C T = 214272; the recompute adds 2 * 25408 + 4 L C T = 54912.
  for (const auto& row : step_records()) {
    EXPECT_NEAR(row.at("hfu").get<double>() / row.at("mfu").get<double>(),
                (214272.0 + 54912.0) / 214272.0, 1e-9)
        << row.dump();
  }
}

TEST_F(FlopsCli, ProfilerPrintsTheModuleTableAtProfileStep) {
  auto r =
      tessera("train --config " + config(R"({"flops_profiler": {"enabled": true, "profile_step": 2,
                                           "module_depth": 4, "top_modules": 2}})"),
              "TESSERA_PEAK_FLOPS=5e10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto at = r.output.find("flops profiler at step 2 (rank 0)");
  ASSERT_NE(at, std::string::npos) << r.output;
  // Printed as soon as step 2's train step is done, before its progress line.
  EXPECT_LT(r.output.find("step     1/3"), at) << r.output;
  EXPECT_GT(r.output.find("step     2/3"), at) << r.output;
  for (const char* row : {"h.0.attn.c_attn", "h.1.mlp.c_fc", "wte", "ln_f", "top 2 by own time"}) {
    EXPECT_NE(r.output.find(row, at), std::string::npos) << row << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("from TESSERA_PEAK_FLOPS"), std::string::npos) << r.output;

  const std::string file = (dir_ / "profile.txt").string();
  nlohmann::json section = {
      {"flops_profiler",
       {{"enabled", true}, {"profile_step", 1}, {"detailed", false}, {"output_file", file}}}};
  auto to_file = tessera("train --config " + config(section.dump(), "out2"));
  ASSERT_EQ(to_file.exit_code, 0) << to_file.output;
  EXPECT_NE(to_file.output.find("written to " + file), std::string::npos) << to_file.output;
  const std::string text = read_text_file(file);
  EXPECT_NE(text.find("flops profiler at step 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("  module "), std::string::npos) << "detailed: false has no table\n" << text;
}

}  // namespace
}  // namespace tessera::testing
