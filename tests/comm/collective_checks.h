// The checks of the collective suite, one function per ProcessGroup op, shared by
// the suite with ranks as threads (test_collectives.cpp) and by the multi-host
// worker started through `tessera run` (tests/comm_multihost/).
//
// Every rank of the group calls the same checks in the same order with the same
// CaseSpace; each check issues its collectives and compares every result with a
// reference this rank computes alone (collective_reference.h): exact ops bitwise,
// avg of floating dtypes within one rounding. A mismatch is a GoogleTest failure
// naming the rank, op, dtype and size; the collectives of the remaining cases are
// still issued, so one wrong result never leaves the other ranks waiting.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "comm/collective_reference.h"
#include <ATen/CPUGeneratorImpl.h>

#include "tessera/comm/comm_stats.h"
#include "tessera/comm/process_group.h"

namespace tessera::testing {

// What a check sweeps. `ops` only matters to the reducing checks.
struct CaseSpace {
  std::vector<at::ScalarType> dtypes;
  std::vector<int64_t> sizes;
  std::vector<comm::ReduceOp> ops;
};

inline std::string rank_label(int rank, const std::string& what) {
  return "[rank " + std::to_string(rank) + "] " + what;
}

// Whether a reduction of dtype by op must match bitwise (all but a floating avg).
inline bool exact_reduction(at::ScalarType dtype, comm::ReduceOp op) {
  return !at::isFloatingType(dtype) || op != comm::ReduceOp::kAvg;
}

// dtypes x ops x sizes all-reduces, queued back to back and waited together, which
// exercises the async queue as well.
inline void check_all_reduce(comm::ProcessGroup& g, const CaseSpace& space, int seed = 0) {
  const int rank = g.rank(), world = g.size();
  struct Case {
    at::Tensor t, expected;
    bool exact;
    std::string what;
  };
  std::vector<comm::WorkHandle> works;
  std::vector<Case> cases;
  for (at::ScalarType dtype : space.dtypes) {
    for (comm::ReduceOp op : space.ops) {
      for (int64_t n : space.sizes) {
        ++seed;
        at::Tensor t = rank_input(rank, n, dtype, seed);
        std::string what = c10::str("all_reduce ", dtype, " ", comm::to_string(op), " n=", n);
        works.push_back(g.all_reduce(t, op));
        cases.push_back(
            {t, reference_reduce(world, n, dtype, seed, op), exact_reduction(dtype, op), what});
      }
    }
  }
  for (size_t i = 0; i < works.size(); ++i) {
    works[i]->wait();
    expect_matches(cases[i].t, cases[i].expected, cases[i].exact, rank_label(rank, cases[i].what));
  }
}

// f16/bf16 sums must be accumulated in float32: one large value plus ones from
// the other ranks rounds away with pairwise half-precision accumulation.
inline void check_half_accuracy(comm::ProcessGroup& g) {
  for (at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    double big = dtype == at::kHalf ? 2048 : 256;  // one ulp = 2 at this magnitude
    at::Tensor t = at::full({33}, g.rank() == 0 ? big : 1.0, at::kDouble).to(dtype);
    g.all_reduce(t)->wait();
    at::Tensor expected = at::full({33}, big + (g.size() - 1), at::kDouble).to(dtype);
    expect_matches(t, expected, true, rank_label(g.rank(), c10::str("half accuracy ", dtype)));
  }
}

// 16-bit reductions send 16 bits and round once: every rank's random values,
// rounded to the dtype, summed in float32 and rounded once, must come back
// bitwise from all_reduce (sum and avg, the average divided before rounding)
// and reduce_scatter; the group's counters must show 2 bytes per element.
inline void check_half_wire(comm::ProcessGroup& g) {
  const int64_t n = 1001;
  for (at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    at::Tensor sum = at::zeros({n}, at::kFloat);
    for (int r = 0; r < g.size(); ++r) {
      sum += at::randn({n}, at::detail::createCPUGenerator(500 + r)).to(dtype).to(at::kFloat);
    }
    at::Tensor mine = at::randn({n}, at::detail::createCPUGenerator(500 + g.rank())).to(dtype);
    at::Tensor t = mine.clone();
    const comm::CommStats before = g.comm_stats();
    g.all_reduce(t)->wait();
    const comm::CommStats after = g.comm_stats();
    expect_matches(t, sum.to(dtype), true, rank_label(g.rank(), c10::str("half wire sum ", dtype)));
    EXPECT_EQ(comm::CommStats::difference(after, before)[comm::OpType::kAllReduce].bytes,
              comm::wire_bytes(comm::OpType::kAllReduce, n * 2, g.size()))
        << rank_label(g.rank(), c10::str("half wire bytes ", dtype));
    t = mine.clone();
    g.all_reduce(t, comm::ReduceOp::kAvg)->wait();
    expect_matches(t, sum.div(g.size()).to(dtype), true,
                   rank_label(g.rank(), c10::str("half wire avg ", dtype)));
    std::vector<int64_t> counts = comm::shard_sizes(n, g.size());
    int64_t offset = 0;
    for (int r = 0; r < g.rank(); ++r) offset += counts[r];
    at::Tensor out = at::empty({counts[g.rank()]}, dtype);
    g.reduce_scatter(out, mine)->wait();
    expect_matches(out, sum.narrow(0, offset, counts[g.rank()]).to(dtype), true,
                   rank_label(g.rank(), c10::str("half wire reduce_scatter ", dtype)));
  }
}

// Every rank as root in turn.
inline void check_broadcast(comm::ProcessGroup& g, const CaseSpace& space) {
  for (int root = 0; root < g.size(); ++root) {
    for (at::ScalarType dtype : space.dtypes) {
      for (int64_t n : space.sizes) {
        at::Tensor t = rank_input(g.rank(), n, dtype, 100 + root);
        g.broadcast(t, root)->wait();
        expect_matches(
            t, rank_input(root, n, dtype, 100 + root), true,
            rank_label(g.rank(), c10::str("broadcast root=", root, " ", dtype, " n=", n)));
      }
    }
  }
}

// The list form with a 2-D shape, then the flat form with uneven shards.
inline void check_all_gather(comm::ProcessGroup& g, const CaseSpace& space) {
  const int rank = g.rank(), world = g.size();
  for (at::ScalarType dtype : space.dtypes) {
    at::Tensor in = rank_input(rank, 15, dtype, 200).view({3, 5});
    std::vector<at::Tensor> outs;
    for (int r = 0; r < world; ++r) outs.push_back(at::zeros({3, 5}, dtype));
    g.all_gather(outs, in)->wait();
    for (int r = 0; r < world; ++r) {
      expect_matches(outs[r], rank_input(r, 15, dtype, 200).view({3, 5}), true,
                     rank_label(rank, c10::str("all_gather list from ", r, " ", dtype)));
    }
    for (int64_t n : space.sizes) {
      std::vector<int64_t> shards = comm::shard_sizes(n, world);
      at::Tensor full = rank_input(0, n, dtype, 201);  // the same on every rank
      int64_t off = 0;
      for (int r = 0; r < rank; ++r) off += shards[r];
      at::Tensor mine = full.narrow(0, off, shards[rank]).clone();
      at::Tensor out = at::zeros({n}, dtype);
      g.all_gather_into(out, mine)->wait();
      expect_matches(out, full, true,
                     rank_label(rank, c10::str("all_gather_into ", dtype, " n=", n)));
    }
  }
}

inline void check_reduce_scatter(comm::ProcessGroup& g, const CaseSpace& space) {
  const int rank = g.rank(), world = g.size();
  for (at::ScalarType dtype : space.dtypes) {
    for (comm::ReduceOp op : space.ops) {
      for (int64_t n : space.sizes) {
        std::vector<int64_t> shards = comm::shard_sizes(n, world);
        int64_t off = 0;
        for (int r = 0; r < rank; ++r) off += shards[r];
        const int seed = static_cast<int>(300 + n);
        at::Tensor in = rank_input(rank, n, dtype, seed);
        at::Tensor out = at::zeros({shards[rank]}, dtype);
        g.reduce_scatter(out, in, op)->wait();
        at::Tensor expected =
            reference_reduce(world, n, dtype, seed, op).narrow(0, off, shards[rank]);
        expect_matches(out, expected, exact_reduction(dtype, op),
                       rank_label(rank, c10::str("reduce_scatter ", dtype, " ", comm::to_string(op),
                                                 " n=", n)));
      }
    }
  }
}

// Rank i's input element k is i * 1000 + k % 1000, so every received value names
// its source (where the dtype holds it exactly; results are compared bitwise
// with the same conversion either way, and no value overflows f16). Equal splits
// of n elements per peer for each n in sizes (empty split lists), then uneven
// splits where rank i sends (i + j) % 3 elements to rank j, zeros included.
inline void check_all_to_all(comm::ProcessGroup& g, const CaseSpace& space) {
  const int rank = g.rank(), world = g.size();
  auto input_of = [](int r, int64_t n, at::ScalarType dtype) {
    return (at::remainder(at::arange(n, at::kLong), 1000) + r * 1000).to(dtype);
  };
  for (at::ScalarType dtype : space.dtypes) {
    std::vector<int64_t> evens = space.sizes;
    evens.push_back(-1);  // the uneven case
    for (int64_t even : evens) {
      auto count = [&](int from, int to) -> int64_t { return even >= 0 ? even : (from + to) % 3; };
      std::vector<int64_t> in_splits, out_splits;
      int64_t in_n = 0, out_n = 0;
      for (int j = 0; j < world; ++j) {
        in_splits.push_back(count(rank, j));
        out_splits.push_back(count(j, rank));
        in_n += in_splits.back();
        out_n += out_splits.back();
      }
      at::Tensor out = at::zeros({out_n}, dtype);
      if (even >= 0) {
        g.all_to_all(out, input_of(rank, in_n, dtype))->wait();
      } else {
        g.all_to_all(out, input_of(rank, in_n, dtype), out_splits, in_splits)->wait();
      }
      std::vector<at::Tensor> parts;
      for (int i = 0; i < world; ++i) {
        int64_t src_off = 0;
        for (int j = 0; j < rank; ++j) src_off += count(i, j);
        parts.push_back(
            input_of(i, src_off + count(i, rank), dtype).narrow(0, src_off, count(i, rank)));
      }
      std::string split = even >= 0 ? c10::str("even n=", even) : std::string("uneven");
      expect_matches(out, at::cat(parts), true,
                     rank_label(rank, c10::str("all_to_all ", split, " ", dtype)));
    }
  }
}

// A ring: every rank sends to the next and receives from the previous, per tag.
inline void check_send_recv(comm::ProcessGroup& g, const CaseSpace& space) {
  const int rank = g.rank(), world = g.size();
  if (world == 1) return;
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  for (at::ScalarType dtype : space.dtypes) {
    for (int64_t n : space.sizes) {
      for (int tag : {0, 7}) {
        at::Tensor out = rank_input(rank, n, dtype, 400 + tag);
        at::Tensor in = at::zeros({n}, dtype);
        auto s = g.send(out, next, tag);
        auto r = g.recv(in, prev, tag);
        s->wait();
        r->wait();
        expect_matches(
            in, rank_input(prev, n, dtype, 400 + tag), true,
            rank_label(rank, c10::str("send/recv ring ", dtype, " n=", n, " tag=", tag)));
      }
    }
  }
}

inline void check_non_contiguous(comm::ProcessGroup& g) {
  at::Tensor base = rank_input(g.rank(), 15, at::kFloat, 500).view({3, 5});
  at::Tensor view = base.t();  // 5x3, not contiguous, shares base's storage
  ASSERT_FALSE(view.is_contiguous());
  g.all_reduce(view)->wait();
  at::Tensor expected = reference_reduce(g.size(), 15, at::kFloat, 500, comm::ReduceOp::kSum);
  expect_matches(base, expected.view({3, 5}), true,
                 rank_label(g.rank(), "all_reduce transposed view"));
}

// Nobody leaves round k before every rank entered it. `arrive` counts this rank
// in and `arrived` reads the count over all ranks: an atomic with ranks as
// threads, a store counter with ranks as processes.
inline void check_barrier(comm::ProcessGroup& g, const std::function<void()>& arrive,
                          const std::function<int64_t()>& arrived) {
  for (int round = 1; round <= 3; ++round) {
    arrive();
    g.barrier()->wait();
    EXPECT_GE(arrived(), round * g.size())
        << rank_label(g.rank(), c10::str("barrier round ", round));
    g.barrier()->wait();
  }
}

// A subgroup of ranks {0, 2}, then the parent again.
inline void check_subgroups(comm::ProcessGroup& g) {
  if (g.size() < 3) return;
  auto sub = g.new_subgroup({0, 2});
  const bool member = g.rank() == 0 || g.rank() == 2;
  ASSERT_EQ(sub != nullptr, member) << rank_label(g.rank(), "subgroup membership");
  if (sub) {
    EXPECT_EQ(sub->size(), 2);
    EXPECT_EQ(sub->rank(), g.rank() / 2);
    at::Tensor t = rank_input(sub->rank(), 1001, at::kFloat, 600);
    sub->all_reduce(t)->wait();
    expect_matches(t, reference_reduce(2, 1001, at::kFloat, 600, comm::ReduceOp::kSum), true,
                   rank_label(g.rank(), "subgroup {0,2} all_reduce"));
    sub->barrier()->wait();
  }
  at::Tensor t = rank_input(g.rank(), 7, at::kInt, 601);
  g.all_reduce(t, comm::ReduceOp::kMax)->wait();
  expect_matches(t, reference_reduce(g.size(), 7, at::kInt, 601, comm::ReduceOp::kMax), true,
                 rank_label(g.rank(), "parent after subgroup"));
}

}  // namespace tessera::testing
