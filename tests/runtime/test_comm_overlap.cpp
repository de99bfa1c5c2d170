// Overlap of gradient communication with backward, judged on when the
// operations really ran (Work start and end times, comm/comm_events.h), not on
// when they were asked for: under DDP and ZeRO stage 2 with overlap on, some
// gradient reduction must have finished before autograd computed the last
// gradient; with overlap off none may, and the same predicate says so.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <vector>

#include "tessera/comm/comm_events.h"
#include "tessera/core/error.h"
#include "tessera/runtime/engine.h"
#include "testing/thread_ranks.h"

namespace tessera::runtime {
namespace {

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Reduction {
  int rank;
  int64_t start_ns;
  int64_t end_ns;
};

struct Pass {
  int64_t begin_ns = 0;      // backward called
  int64_t last_grad_ns = 0;  // autograd produced the last parameter gradient
  int64_t end_ns = 0;        // backward returned (reductions waited for)
};

// The predicate of the acceptance test: within [begin, end] of a pass, some
// reduction of this rank finished before the last gradient was computed.
bool overlapped(const Pass& p, int rank, const std::vector<Reduction>& all, int64_t* lead_ns) {
  bool any = false;
  for (const auto& r : all) {
    if (r.rank != rank || r.start_ns < p.begin_ns || r.end_ns > p.end_ns) continue;
    if (r.end_ns < p.last_grad_ns) {
      any = true;
      *lead_ns = std::max(*lead_ns, p.last_grad_ns - r.end_ns);
    }
  }
  return any;
}

// Twelve 256x256 layers; returns per rank how many of `passes` backward passes
// overlapped their communication with computation. DDP's first bucket (1 MiB)
// holds the last four layers, so the eight layers below it are the window in
// which its all_reduce can finish early: wide enough (about 20 ms here) that a
// rank running a few milliseconds behind the other still shows the overlap.
std::vector<int> overlapping_passes(const std::string& config_json, int passes) {
  std::mutex mu;
  std::vector<Reduction> reductions;
  const int listener = comm::add_comm_listener([&](const comm::CommEvent& e) {
    if (e.op != comm::OpType::kAllReduce && e.op != comm::OpType::kReduceScatter) return;
    std::lock_guard<std::mutex> lock(mu);
    reductions.push_back({context_rank(), e.times.started_ns, e.times.finished_ns});
  });
  std::vector<std::vector<Pass>> per_rank(2);
  tessera::testing::run_ranks(2, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 60);
    torch::nn::Sequential seq;
    for (int i = 0; i < 12; ++i) {
      seq->push_back(torch::nn::Linear(256, 256));
      seq->push_back(torch::nn::Tanh());
    }
    Engine engine = tessera::initialize(seq.ptr(), Config::from_string(config_json), group);
    std::atomic<int64_t> last_grad{0};
    for (auto& p : seq->parameters()) {
      p.register_hook([&last_grad](const at::Tensor& g) {
        last_grad = std::max<int64_t>(last_grad.load(), steady_now_ns());
        return g;
      });
    }
    for (int it = 0; it < passes; ++it) {
      auto x = at::randn({512, 256});
      auto loss = seq->forward(x).pow(2).mean();
      Pass pass;
      last_grad = 0;
      pass.begin_ns = steady_now_ns();
      engine.backward(loss);
      pass.end_ns = steady_now_ns();
      pass.last_grad_ns = last_grad.load();
      engine.step();
      per_rank[rank].push_back(pass);
    }
  });
  comm::remove_comm_listener(listener);
  std::vector<int> counts(2, 0);
  for (int rank = 0; rank < 2; ++rank) {
    int64_t lead = 0;
    for (const Pass& p : per_rank[rank]) counts[rank] += overlapped(p, rank, reductions, &lead);
    std::printf("[overlap] rank %d: %d of %d passes overlapped; best lead %.2f ms\n", rank,
                counts[rank], passes, lead / 1e6);
  }
  return counts;
}

const char* kDdp = R"({"train_batch_size": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
  "data_parallel": {"bucket_cap_mb": 0.25, "overlap_comm": %s}})";
const char* kZero2 = R"({"train_batch_size": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
  "zero_optimization": {"stage": 2, "reduce_bucket_size": 66000, "overlap_comm": %s}})";

std::string with_overlap(const char* format, bool on) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), format, on ? "true" : "false");
  return buf;
}

TEST(CommOverlap, DdpAllReducesFinishWhileBackwardStillComputes) {
  const auto counts = overlapping_passes(with_overlap(kDdp, true), 4);
  for (int c : counts) EXPECT_GE(c, 2) << "a bucket's all_reduce must end before the last gradient";
}

TEST(CommOverlap, DdpWithOverlapOffFailsTheSameCheck) {
  const auto counts = overlapping_passes(with_overlap(kDdp, false), 4);
  for (int c : counts) EXPECT_EQ(c, 0) << "no all_reduce may run before backward ends";
}

TEST(CommOverlap, ZeroStage2ReduceScattersFinishWhileBackwardStillComputes) {
  const auto counts = overlapping_passes(with_overlap(kZero2, true), 4);
  for (int c : counts) EXPECT_GE(c, 2);
}

TEST(CommOverlap, ZeroStage2WithOverlapOffFailsTheSameCheck) {
  const auto counts = overlapping_passes(with_overlap(kZero2, false), 4);
  for (int c : counts) EXPECT_EQ(c, 0);
}

}  // namespace
}  // namespace tessera::runtime
