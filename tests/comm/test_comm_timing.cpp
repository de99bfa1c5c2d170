// Timing in the communication layer: every Work records when it was queued,
// started and finished; groups keep busy time per op type; listeners
// (comm_events.h) see every finished op with its bytes; the comms logger's
// totals equal the counters', and its bandwidths follow from bytes and times.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/comm/comm_events.h"
#include "tessera/comm/comms_logger.h"
#include "tessera/core/error.h"
#include "testing/thread_ranks.h"

namespace tessera::testing {
namespace {

using comm::OpType;

TEST(WorkTiming, QueuedStartedAndFinishedInOrder) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    // Rank 1 joins late: rank 0's all_reduce starts at once but can only finish
    // once rank 1 arrives, so its start-to-end span covers the wait.
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto t = at::ones({1024});
    auto work = group->all_reduce(t);
    work->wait();
    const comm::WorkTimes w = work->times_ns();
    EXPECT_GT(w.enqueued_ns, 0);
    EXPECT_LE(w.enqueued_ns, w.started_ns);
    EXPECT_LE(w.started_ns, w.finished_ns);
    if (rank == 0) {
      EXPECT_GT(w.finished_ns - w.started_ns, 100'000'000) << "the wait for rank 1";
    }
    const auto stats = group->comm_stats();
    EXPECT_EQ(stats[OpType::kAllReduce].calls, 1u);
    EXPECT_GE(stats[OpType::kAllReduce].busy_ns,
              static_cast<uint64_t>(w.finished_ns - w.started_ns));
    EXPECT_EQ(stats[OpType::kBroadcast].busy_ns, 0u);
  });
}

TEST(WorkTiming, QueuedOpsStartWhenTheOneBeforeEnds) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
    auto a = group->all_reduce(at::ones({256}));
    auto b = group->all_reduce(at::ones({256}));
    b->wait();
    a->wait();
    const auto ta = a->times_ns(), tb = b->times_ns();
    // One queue: b waits for a; its enqueue time is before a's end, its start after.
    EXPECT_LE(tb.enqueued_ns, ta.finished_ns);
    EXPECT_GE(tb.started_ns, ta.finished_ns);
  });
}

TEST(CommEvents, ListenersSeeEveryOpWithItsBytesAndGroup) {
  std::mutex mu;
  std::vector<comm::CommEvent> seen;
  std::vector<std::string> groups;
  const int id = comm::add_comm_listener([&](const comm::CommEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(e);
    groups.push_back(*e.group);
  });
  run_ranks(2, [](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    group->all_reduce(at::ones({1000}))->wait();  // 4000 bytes
    std::vector<at::Tensor> outs = {at::empty({10}), at::empty({10})};
    group->all_gather(outs, at::ones({10}))->wait();  // 80 bytes gathered
    if (rank == 0) group->send(at::ones({5}), 1)->wait();
    if (rank == 1) group->recv(at::empty({5}), 0)->wait();
  });
  comm::remove_comm_listener(id);
  int all_reduce = 0, all_gather = 0, send = 0, recv = 0;
  for (const auto& e : seen) {
    EXPECT_TRUE(e.ok);
    EXPECT_EQ(e.group_size, 2);
    EXPECT_LE(e.times.started_ns, e.times.finished_ns);
    if (e.op == OpType::kAllReduce && e.payload_bytes == 4000) {
      ++all_reduce;
      EXPECT_EQ(e.wire_bytes, 4000u);  // 2 (n-1)/n B at n = 2
      EXPECT_GT(e.seq, 0u);
    }
    if (e.op == OpType::kAllGather && e.payload_bytes == 80) ++all_gather;
    if (e.op == OpType::kSend) {
      ++send;
      EXPECT_EQ(e.peer, 1);
      EXPECT_EQ(e.payload_bytes, 20u);
    }
    if (e.op == OpType::kRecv) ++recv;
  }
  EXPECT_EQ(all_reduce, 2);  // one per rank
  EXPECT_EQ(all_gather, 2);
  EXPECT_EQ(send, 1);
  EXPECT_EQ(recv, 1);
  // After removal nothing arrives.
  const size_t before = seen.size();
  run_ranks(2, [](int rank, int size, std::shared_ptr<comm::Store> store) {
    make_group(rank, size, store, "gloo")->all_reduce(at::ones({4}))->wait();
  });
  EXPECT_EQ(seen.size(), before);
}

TEST(CommsLogger, TotalsEqualTheCountersAndBandwidthFollowsFromBytesAndTime) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    comm::CommsLoggerOptions o;
    o.enabled = true;
    comm::CommsLogger logger(o, rank);
    const auto before = group->comm_stats();
    for (int i = 0; i < 3; ++i) group->all_reduce(at::ones({1 << 16}))->wait();
    group->all_reduce(at::ones({100}))->wait();
    group->broadcast(at::ones({50}), 0)->wait();
    auto out = at::empty({64});
    group->reduce_scatter(out, at::ones({128}))->wait();
    group->barrier()->wait();
    const auto counted = comm::CommStats::difference(group->comm_stats(), before);
    const comm::CommSummary s = logger.summary();
    EXPECT_EQ(s.total_count, counted.total_calls());
    EXPECT_EQ(s.total_wire_bytes, counted.total_bytes());
    bool found = false;
    for (const auto& r : s.rows) {
      if (r.op == OpType::kAllReduce && r.message_bytes == (1u << 18)) {
        found = true;
        EXPECT_EQ(r.count, 3u);
        EXPECT_NEAR(r.mean_ms, r.total_ms / 3, 1e-9);
        EXPECT_NEAR(r.algbw_gbps, r.message_bytes / (r.mean_ms * 1e6), 1e-9);
        EXPECT_NEAR(r.busbw_gbps, r.algbw_gbps * 1.0, 1e-9);  // 2 (n-1)/n = 1 at n = 2
      }
    }
    EXPECT_TRUE(found);
    const std::string table = s.table();
    EXPECT_NE(table.find("all_reduce"), std::string::npos);
    EXPECT_NE(table.find("reduce_scatter"), std::string::npos);
    EXPECT_NE(table.find("busbw"), std::string::npos);
  });
}

TEST(CommsLogger, ProfOpsRecordsOnlyTheNamedOps) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    comm::CommsLoggerOptions o;
    o.enabled = true;
    o.prof_all = false;
    o.prof_ops = {"broadcast"};
    comm::CommsLogger logger(o, rank);
    group->all_reduce(at::ones({8}))->wait();
    group->broadcast(at::ones({8}), 0)->wait();
    const auto s = logger.summary();
    ASSERT_EQ(s.rows.size(), 1u);
    EXPECT_EQ(s.rows[0].op, OpType::kBroadcast);
  });
  comm::CommsLoggerOptions bad;
  bad.prof_ops = {"allreduce"};
  try {
    comm::CommsLogger logger(bad);
    FAIL() << "an unknown op name must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::testing
