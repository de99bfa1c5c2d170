// The collective suite: every backend that constructs with ranks as threads x
// world size 1..4, every op through ProcessGroup, checked against references
// computed locally from every rank's deterministic input. One group per
// (backend, world size) runs all cases, which keeps the binary fast.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>

#include "comm/collective_reference.h"
#include "tessera/comm/backend_registry.h"
#include "testing/thread_ranks.h"

namespace tessera::testing {
namespace {

using comm::ProcessGroup;
using comm::ReduceOp;

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kHalf,
                                             at::kBFloat16, at::kInt, at::kLong};
const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin,
                                    ReduceOp::kMax, ReduceOp::kProduct};
// Sizes that don't divide by the world sizes, fewer elements than ranks (3 over 4
// ranks leaves one shard empty), and empty.
const std::vector<int64_t> kSizes = {0, 3, 7, 1001};

std::string label(int rank, const std::string& what) {
  return "[rank " + std::to_string(rank) + "] " + what;
}

// Whether `backend` can run with ranks as threads in this build; the reason if not.
// mpi needs one process per rank; others are probed by building a 2-rank group.
std::string skip_reason(const std::string& backend) {
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(backend);
  if (it != cache.end()) return it->second;
  std::string reason;
  if (backend == "mpi") {
    reason = "mpi runs one process per rank, not threads";
  } else if (backend == "nccl") {
    reason = "nccl needs GPUs";
  } else {
    try {
      run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
        auto g = make_group(rank, size, store, backend, 5);
        g->barrier()->wait();
      });
    } catch (const std::exception& e) {
      reason = std::string("backend does not construct with threads: ") + e.what();
    }
  }
  return cache[backend] = reason;
}

void check_all_reduce(ProcessGroup& g, int seed) {
  const int rank = g.rank(), world = g.size();
  std::vector<comm::WorkHandle> works;
  struct Case {
    at::Tensor t, expected;
    bool exact;
    std::string what;
  };
  std::vector<Case> cases;
  for (at::ScalarType dtype : kDtypes) {
    for (ReduceOp op : kOps) {
      for (int64_t n : kSizes) {
        ++seed;
        at::Tensor t = rank_input(rank, n, dtype, seed);
        at::Tensor expected = reference_reduce(world, n, dtype, seed, op);
        bool exact = !at::isFloatingType(dtype) || op != ReduceOp::kAvg;
        std::string what = c10::str("all_reduce ", dtype, " ", comm::to_string(op), " n=", n);
        works.push_back(g.all_reduce(t, op));
        cases.push_back({t, expected, exact, what});
      }
    }
  }
  // Queued back to back, waited together: exercises the async queue as well.
  for (size_t i = 0; i < works.size(); ++i) {
    works[i]->wait();
    expect_matches(cases[i].t, cases[i].expected, cases[i].exact, label(rank, cases[i].what));
  }
}

// f16/bf16 sums must be accumulated in float32: one large value plus ones from
// the other ranks rounds away with pairwise half-precision accumulation.
void check_half_accuracy(ProcessGroup& g) {
  for (at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    double big = dtype == at::kHalf ? 2048 : 256;  // one ulp = 2 at this magnitude
    at::Tensor t = at::full({33}, g.rank() == 0 ? big : 1.0, at::kDouble).to(dtype);
    g.all_reduce(t)->wait();
    at::Tensor expected = at::full({33}, big + (g.size() - 1), at::kDouble).to(dtype);
    expect_matches(t, expected, /*exact=*/true, label(g.rank(), c10::str("half accuracy ", dtype)));
  }
}

void check_broadcast(ProcessGroup& g) {
  for (int root = 0; root < g.size(); ++root) {
    for (at::ScalarType dtype : {at::kFloat, at::kLong, at::kBFloat16}) {
      for (int64_t n : kSizes) {
        at::Tensor t = rank_input(g.rank(), n, dtype, 100 + root);
        g.broadcast(t, root)->wait();
        expect_matches(t, rank_input(root, n, dtype, 100 + root), true,
                       label(g.rank(), c10::str("broadcast root=", root, " ", dtype, " n=", n)));
      }
    }
  }
}

void check_all_gather(ProcessGroup& g) {
  const int rank = g.rank(), world = g.size();
  for (at::ScalarType dtype : {at::kFloat, at::kInt, at::kHalf}) {
    // List form with a 2-D shape.
    at::Tensor in = rank_input(rank, 15, dtype, 200).view({3, 5});
    std::vector<at::Tensor> outs;
    for (int r = 0; r < world; ++r) outs.push_back(at::zeros({3, 5}, dtype));
    g.all_gather(outs, in)->wait();
    for (int r = 0; r < world; ++r) {
      expect_matches(outs[r], rank_input(r, 15, dtype, 200).view({3, 5}), true,
                     label(rank, c10::str("all_gather list from ", r, " ", dtype)));
    }
    // Flat form, uneven shards; the full tensor is the concatenation of shards.
    for (int64_t n : kSizes) {
      std::vector<int64_t> shards = comm::shard_sizes(n, world);
      at::Tensor full = rank_input(0, n, dtype, 201);  // the same on every rank
      int64_t off = 0;
      for (int r = 0; r < rank; ++r) off += shards[r];
      at::Tensor mine = full.narrow(0, off, shards[rank]).clone();
      at::Tensor out = at::zeros({n}, dtype);
      g.all_gather_into(out, mine)->wait();
      expect_matches(out, full, true, label(rank, c10::str("all_gather_into ", dtype, " n=", n)));
    }
  }
}

void check_reduce_scatter(ProcessGroup& g) {
  const int rank = g.rank(), world = g.size();
  for (at::ScalarType dtype : {at::kFloat, at::kLong, at::kHalf, at::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      for (int64_t n : kSizes) {
        std::vector<int64_t> shards = comm::shard_sizes(n, world);
        int64_t off = 0;
        for (int r = 0; r < rank; ++r) off += shards[r];
        at::Tensor in = rank_input(rank, n, dtype, 300 + n);
        at::Tensor out = at::zeros({shards[rank]}, dtype);
        g.reduce_scatter(out, in, op)->wait();
        at::Tensor expected =
            reference_reduce(world, n, dtype, 300 + n, op).narrow(0, off, shards[rank]);
        bool exact = !at::isFloatingType(dtype) || op != ReduceOp::kAvg;
        expect_matches(out, expected, exact,
                       label(rank, c10::str("reduce_scatter ", dtype, " ", comm::to_string(op),
                                            " n=", n)));
      }
    }
  }
}

// Rank i's input element k is i * 1000 + k, so every received value names its source.
void check_all_to_all(ProcessGroup& g) {
  const int rank = g.rank(), world = g.size();
  auto input_of = [](int r, int64_t n, at::ScalarType dtype) {
    return (at::arange(n, at::kLong) + r * 1000).to(dtype);
  };
  for (at::ScalarType dtype : {at::kFloat, at::kLong}) {
    // Even splits (empty lists), then uneven ones where rank i sends (i + j) % 3
    // elements to rank j, zeros included.
    for (bool even : {true, false}) {
      auto count = [&](int from, int to) -> int64_t { return even ? 4 : (from + to) % 3; };
      std::vector<int64_t> in_splits, out_splits;
      int64_t in_n = 0, out_n = 0;
      for (int j = 0; j < world; ++j) {
        in_splits.push_back(count(rank, j));
        out_splits.push_back(count(j, rank));
        in_n += in_splits.back();
        out_n += out_splits.back();
      }
      at::Tensor out = at::zeros({out_n}, dtype);
      if (even) {
        g.all_to_all(out, input_of(rank, in_n, dtype))->wait();
      } else {
        g.all_to_all(out, input_of(rank, in_n, dtype), out_splits, in_splits)->wait();
      }
      std::vector<at::Tensor> parts;
      for (int i = 0; i < world; ++i) {
        int64_t src_off = 0;
        for (int j = 0; j < rank; ++j) src_off += count(i, j);
        parts.push_back(input_of(i, src_off + count(i, rank), dtype).narrow(0, src_off,
                                                                             count(i, rank)));
      }
      expect_matches(out, at::cat(parts), true,
                     label(rank, c10::str("all_to_all ", even ? "even " : "uneven ", dtype)));
    }
  }
}

void check_send_recv(ProcessGroup& g) {
  const int rank = g.rank(), world = g.size();
  if (world == 1) return;
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  for (int64_t n : {int64_t{7}, int64_t{1001}, int64_t{0}}) {
    for (int tag : {0, 7}) {
      at::Tensor out = rank_input(rank, n, at::kFloat, 400 + tag);
      at::Tensor in = at::zeros({n}, at::kFloat);
      auto s = g.send(out, next, tag);
      auto r = g.recv(in, prev, tag);
      s->wait();
      r->wait();
      expect_matches(in, rank_input(prev, n, at::kFloat, 400 + tag), true,
                     label(rank, c10::str("send/recv ring n=", n, " tag=", tag)));
    }
  }
}

void check_non_contiguous(ProcessGroup& g) {
  at::Tensor base = rank_input(g.rank(), 15, at::kFloat, 500).view({3, 5});
  at::Tensor view = base.t();  // 5x3, not contiguous, shares base's storage
  ASSERT_FALSE(view.is_contiguous());
  g.all_reduce(view)->wait();
  at::Tensor expected = reference_reduce(g.size(), 15, at::kFloat, 500, ReduceOp::kSum);
  expect_matches(base, expected.view({3, 5}), true, label(g.rank(), "all_reduce transposed view"));
}

void check_barrier(ProcessGroup& g, std::atomic<int>& arrived) {
  for (int round = 1; round <= 3; ++round) {
    arrived.fetch_add(1);
    g.barrier()->wait();
    // Nobody leaves round k before everyone entered it.
    EXPECT_GE(arrived.load(), round * g.size()) << label(g.rank(), "barrier round");
    g.barrier()->wait();
  }
}

void check_subgroups(ProcessGroup& g) {
  if (g.size() < 3) return;
  auto sub = g.new_subgroup({0, 2});
  const bool member = g.rank() == 0 || g.rank() == 2;
  ASSERT_EQ(sub != nullptr, member) << label(g.rank(), "subgroup membership");
  if (sub) {
    EXPECT_EQ(sub->size(), 2);
    EXPECT_EQ(sub->rank(), g.rank() / 2);
    at::Tensor t = rank_input(sub->rank(), 1001, at::kFloat, 600);
    sub->all_reduce(t)->wait();
    expect_matches(t, reference_reduce(2, 1001, at::kFloat, 600, ReduceOp::kSum), true,
                   label(g.rank(), "subgroup {0,2} all_reduce"));
    sub->barrier()->wait();
  }
  // The parent still works after (and interleaved with) the subgroup.
  at::Tensor t = rank_input(g.rank(), 7, at::kInt, 601);
  g.all_reduce(t, ReduceOp::kMax)->wait();
  expect_matches(t, reference_reduce(g.size(), 7, at::kInt, 601, ReduceOp::kMax), true,
                 label(g.rank(), "parent after subgroup"));
}

class CollectiveSuite : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CollectiveSuite, EveryOpMatchesReference) {
  const auto& [backend, world] = GetParam();
  std::string reason = skip_reason(backend);
  if (!reason.empty()) GTEST_SKIP() << reason;
  std::atomic<int> arrived{0};
  run_ranks(world, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto g = make_group(rank, size, store, backend, 20);
    EXPECT_EQ(g->backend_name(), backend);
    check_all_reduce(*g, 0);
    check_half_accuracy(*g);
    check_broadcast(*g);
    check_all_gather(*g);
    check_reduce_scatter(*g);
    check_all_to_all(*g);
    check_send_recv(*g);
    check_non_contiguous(*g);
    check_barrier(*g, arrived);
    check_subgroups(*g);
    g->barrier()->wait();  // nobody tears down while a peer still needs it
  });
}

std::vector<std::tuple<std::string, int>> suite_params() {
  std::vector<std::tuple<std::string, int>> params;
  for (const auto& backend : comm::available_backends()) {
    for (int world = 1; world <= 4; ++world) params.emplace_back(backend, world);
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Backends, CollectiveSuite, ::testing::ValuesIn(suite_params()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_world" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace tessera::testing
