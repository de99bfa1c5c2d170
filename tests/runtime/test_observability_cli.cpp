// The timeline and the comms logger of a real 2-rank `tessera train` through
// `tessera run`: one merged Chrome trace that parses as JSON, with a track per
// rank, compute spans, and in every backward pass each DDP bucket's all_reduce
// with its bytes (together the model's gradient bytes); the comms logger's
// totals equal the communication counters' for the same window.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "testing/files.h"
#include "testing/subprocess.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

struct Span {
  std::string name;
  double ts = 0, dur = 0;  // microseconds
  int tid = 0;
  nlohmann::json args;
};

TEST(ObservabilityCli, TwoRankTimelineHasEveryBucketAndTheCommsLoggerMatchesTheCounters) {
  TempDir tmp("observability");
  const fs::path dir = tmp.path();
  {
    std::ofstream text(dir / "corpus.txt");
    for (int i = 0; i < 300; ++i) text << "observability of a small run " << i % 5 << ".\n";
  }
  const std::string config = (dir / "config.json").string();
  std::ofstream(config) << R"({
    "train_micro_batch_size_per_gpu": 4, "steps_per_print": 2, "seed": 5,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
    "data_parallel": {"bucket_cap_mb": 1},
    "comms_logger": {"enabled": true},
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 256, "block_size": 32},
    "data": {"path": ")" << (dir / "corpus.txt").string() << R"("},
    "train": {"steps": 6, "eval_interval": 0, "checkpoint_interval": 0, "sample_length": 0}})";
  const std::string timeline = (dir / "trace").string();
  const std::string bin = tessera_bin();
  const auto r = run_command("TESSERA_TIMEOUT=30 TESSERA_TIMELINE=" + timeline + " " + bin +
                                 " run --master-port 0 -n 2 " + bin + " train --config " + config +
                                 " --out " + (dir / "out").string() + " 2>&1",
                             240);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("GPT (\\d+) params"))) << r.output;
  const long long params = std::stoll(m[1]);
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex("comms logger totals: (\\d+) ops, (\\d+) bytes sent; comm counters \\(world "
                 "group\\): (\\d+) ops, (\\d+) bytes sent")))
      << r.output;
  EXPECT_EQ(m[1], m[3]) << "ops";
  EXPECT_EQ(m[2], m[4]) << "bytes";
  EXPECT_GT(std::stoll(m[1]), 6);
  EXPECT_NE(r.output.find("busbw GB/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("timeline: " + timeline + "/timeline.json"), std::string::npos)
      << r.output;

  std::ifstream in(timeline + "/timeline.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json trace = nlohmann::json::parse(in);  // throws if not JSON
  std::map<int, std::vector<Span>> spans;                 // by rank (pid)
  std::map<int, std::map<int, std::string>> lanes;        // pid -> tid -> name
  std::set<std::string> tracks;
  for (const auto& e : trace.at("traceEvents")) {
    const int pid = e.at("pid");
    if (e.at("ph") == "M") {
      if (e.at("name") == "process_name") tracks.insert(e.at("args").at("name").get<std::string>());
      if (e.at("name") == "thread_name") lanes[pid][e.at("tid")] = e.at("args").at("name");
      continue;
    }
    ASSERT_EQ(e.at("ph"), "X");
    spans[pid].push_back({e.at("name"), e.at("ts"), e.at("dur"), e.at("tid"),
                          e.value("args", nlohmann::json::object())});
  }
  EXPECT_EQ(tracks, (std::set<std::string>{"rank 0", "rank 1"}));
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<Span> backward, reduces;
    int forward = 0, steps = 0;
    for (const auto& s : spans[rank]) {
      if (s.name == "backward") backward.push_back(s);
      if (s.name == "forward") ++forward;
      if (s.name == "optimizer step") ++steps;
      if (s.name == "all_reduce") {
        EXPECT_EQ(lanes[rank][s.tid].rfind("comm ", 0), 0u) << lanes[rank][s.tid];
        reduces.push_back(s);
      }
    }
    EXPECT_EQ(backward.size(), 6u) << "rank " << rank;
    EXPECT_EQ(forward, 6);
    EXPECT_EQ(steps, 6);
    size_t buckets = 0;
    for (const auto& b : backward) {
      long long bytes = 0;
      size_t count = 0;
      for (const auto& s : reduces) {
        if (s.ts >= b.ts && s.ts <= b.ts + b.dur) {
          bytes += s.args.at("bytes").get<long long>();
          EXPECT_GT(s.args.at("wire_bytes").get<long long>(), 0);
          ++count;
        }
      }
      EXPECT_EQ(bytes, 4 * params) << "every gradient byte in some bucket's all_reduce";
      EXPECT_GE(count, 3u) << "1 MB buckets of a 6.5 MB model: several per pass";
      if (buckets == 0) buckets = count;
      EXPECT_EQ(count, buckets) << "the same buckets every step";
    }
  }
}

}  // namespace
}  // namespace tessera::testing
