// The timeline recorder (core/trace.h): spans land in this rank's Chrome trace
// with their lanes and arguments, rank 0 merges every rank's file into one with
// a track per rank, files of an earlier run are never merged, and nothing is
// recorded when off.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/core/trace.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() /
                     ("tessera_trace_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d.string();
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

TEST(Trace, OffRecordsNothingAndFinishReturnsEmpty) {
  EXPECT_FALSE(trace::enabled());
  { trace::Scope s("forward"); }
  trace::record("x", "compute", 1, 2, 0);
  EXPECT_EQ(trace::finish(), "");
}

TEST(Trace, OneRankWritesSpansWithLanesAndArgs) {
  const std::string dir = temp_dir("one");
  trace::start(dir, 0, 1);
  EXPECT_TRUE(trace::enabled());
  EXPECT_THROW(trace::start(dir, 0, 1), ConfigError);  // one recording per process
  { trace::Scope s("forward"); }
  const int comm = trace::lane("comm default");
  EXPECT_EQ(trace::lane("comm default"), comm);
  const int64_t t0 = trace::now_ns();
  trace::record("all_reduce", "comm", t0, t0 + 5000, comm, "\"bytes\":4096,\"group\":\"a\\\"b\"");
  const std::string merged = trace::finish(std::chrono::seconds(5));
  EXPECT_FALSE(trace::enabled());
  EXPECT_EQ(merged, dir + "/timeline.json");
  const auto j = read_json(merged);
  int spans = 0;
  bool named_rank = false, named_lane = false;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name") {
      named_rank = e.at("args").at("name") == "rank 0";
    }
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("tid") == comm) {
      named_lane = e.at("args").at("name") == "comm default";
    }
    if (e.at("ph") != "X") continue;
    ++spans;
    if (e.at("name") == "all_reduce") {
      EXPECT_EQ(e.at("tid"), comm);
      EXPECT_EQ(e.at("args").at("bytes"), 4096);
      EXPECT_EQ(e.at("args").at("group"), "a\"b");
      EXPECT_NEAR(e.at("dur").get<double>(), 5.0, 1e-9);  // microseconds
    }
    if (e.at("name") == "forward") {
      EXPECT_EQ(e.at("tid"), 0);
    }
  }
  EXPECT_EQ(spans, 2);
  EXPECT_TRUE(named_rank);
  EXPECT_TRUE(named_lane);
  fs::remove_all(dir);
}

TEST(Trace, RankZeroMergesEveryRanksFileIntoOneTrackEach) {
  const std::string dir = temp_dir("merge");
  // Rank 1 of a 2-rank job (as if another process): its file appears late.
  trace::start(dir, 1, 2);
  { trace::Scope s("backward"); }
  const std::string rank1 = trace::finish();
  EXPECT_EQ(rank1, dir + "/timeline.rank1.json");
  const std::string rank1_text = [&] {
    std::ifstream in(rank1);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }();
  fs::remove(rank1);
  trace::start(dir, 0, 2);
  { trace::Scope s("forward"); }
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::ofstream(dir + "/timeline.rank1.json.partial") << rank1_text;
    fs::rename(dir + "/timeline.rank1.json.partial", dir + "/timeline.rank1.json");
  });
  const std::string merged = trace::finish(std::chrono::seconds(10));
  late.join();
  const auto j = read_json(merged);
  std::set<int> pids;
  std::set<std::string> names;
  for (const auto& e : j.at("traceEvents")) {
    pids.insert(e.at("pid").get<int>());
    if (e.at("ph") == "X") names.insert(e.at("name").get<std::string>() + "@" +
                                        std::to_string(e.at("pid").get<int>()));
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_TRUE(names.count("forward@0"));
  EXPECT_TRUE(names.count("backward@1"));
  fs::remove_all(dir);
}

TEST(Trace, AFileOfAnEarlierRunIsNotMerged) {
  const std::string dir = temp_dir("stale");
  fs::create_directories(dir);
  // What an earlier run of the same rank left behind is removed at start().
  std::ofstream(dir + "/timeline.rank0.json") << "{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"old\"}]}";
  trace::start(dir, 0, 1);
  EXPECT_FALSE(fs::exists(dir + "/timeline.rank0.json"));
  { trace::Scope s("new"); }
  const auto j = read_json(trace::finish(std::chrono::seconds(5)));
  for (const auto& e : j.at("traceEvents")) EXPECT_NE(e.value("name", ""), "old");
  fs::remove_all(dir);
}

TEST(Trace, AMissingRankIsLeftOutAfterTheWait) {
  const std::string dir = temp_dir("missing");
  trace::start(dir, 0, 2);
  { trace::Scope s("forward"); }
  const auto j = read_json(trace::finish(std::chrono::seconds(1)));
  for (const auto& e : j.at("traceEvents")) EXPECT_EQ(e.at("pid"), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
