// The mpi backend driven directly (no ProcessGroup): every op and dtype, uneven
// and empty sizes, subgroups, tags, unsupported dtypes and the op timeout.
#include "comm_mpi/mpi_test_util.h"
#include "tessera/comm/mpi/mpi_backend.h"
#include "tessera/core/error.h"

#include <chrono>
#include <thread>

namespace tessera::testing {
namespace {

using comm::ReduceOp;

const std::vector<at::ScalarType> kReduceTypes = {at::kFloat, at::kDouble, at::kInt, at::kLong,
                                                  at::kByte};
const std::vector<at::ScalarType> kMoveTypes = {at::kFloat, at::kDouble, at::kInt,
                                                at::kLong,  at::kHalf,   at::kBFloat16};

// Sum over ranks of rank_input(n, r).
at::Tensor expected_sum(int64_t n, int size, at::ScalarType dtype) {
  auto sum = at::zeros({n}, at::kLong);
  for (int r = 0; r < size; ++r) sum += rank_input(n, r, at::kLong);
  return sum.to(dtype);
}

// Uneven counts with a zero: rank i holds (i * 3) % 5 elements.
std::vector<int64_t> uneven_counts(int size) {
  std::vector<int64_t> c(size);
  for (int i = 0; i < size; ++i) c[i] = (i * 3) % 5;
  return c;
}

TEST(MpiBackend, RefusesToStartOutsideMpirun) {
  if (under_mpirun()) GTEST_SKIP() << "checks the plain-process case";
  comm::BackendContext ctx;
  try {
    comm::make_mpi_backend(ctx);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("one process per rank started by mpirun"),
              std::string::npos)
        << e.what();
  }
}

class MpiWorld : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_MPIRUN();
    if (!backend_) backend_ = comm::make_mpi_backend(mpi_context(world_ranks(), "world"));
  }
  static std::unique_ptr<comm::Backend> backend_;
};
std::unique_ptr<comm::Backend> MpiWorld::backend_;

TEST_F(MpiWorld, AllReduceEveryDtypeAndOp) {
  auto& b = *backend_;
  for (auto dtype : kReduceTypes) {
    for (int64_t n : {0, 1, 7, 1000}) {
      auto t = rank_input(n, b.rank(), dtype);
      b.all_reduce(t, ReduceOp::kSum);
      EXPECT_TRUE(at::equal(t, expected_sum(n, b.size(), dtype))) << dtype << " n=" << n;
    }
    auto t = at::full({5}, b.rank() + 1, dtype);
    b.all_reduce(t, ReduceOp::kMax);
    EXPECT_TRUE(at::equal(t, at::full({5}, b.size(), dtype))) << dtype;
    t = at::full({5}, b.rank() + 1, dtype);
    b.all_reduce(t, ReduceOp::kMin);
    EXPECT_TRUE(at::equal(t, at::full({5}, 1, dtype))) << dtype;
  }
  EXPECT_FALSE(b.reduces_natively(at::kHalf));
  EXPECT_FALSE(b.reduces_natively(at::kBFloat16));
  EXPECT_TRUE(b.reduces_natively(at::kFloat));
  auto h = at::ones({4}, at::kHalf);
  EXPECT_THROW(b.all_reduce(h, ReduceOp::kSum), CommError);
  auto f = at::ones({4}, at::kFloat);
  EXPECT_THROW(b.all_reduce(f, ReduceOp::kAvg), CommError);
}

TEST_F(MpiWorld, BroadcastFromEveryRoot) {
  auto& b = *backend_;
  for (auto dtype : kMoveTypes) {
    for (int root = 0; root < b.size(); ++root) {
      for (int64_t n : {0, 3, 513}) {
        auto t = b.rank() == root ? rank_input(n, root, dtype) : at::zeros({n}, dtype);
        b.broadcast(t, root);
        EXPECT_TRUE(at::equal(t, rank_input(n, root, dtype))) << dtype << " root " << root;
      }
    }
  }
}

TEST_F(MpiWorld, AllGatherUnevenAndEmpty) {
  auto& b = *backend_;
  for (auto dtype : kMoveTypes) {
    for (auto counts : {uneven_counts(b.size()), std::vector<int64_t>(b.size(), 0),
                        std::vector<int64_t>(b.size(), 64)}) {
      auto input = at::full({counts[b.rank()]}, b.rank() + 1, dtype);
      int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
      auto output = at::zeros({total}, dtype);
      b.all_gather(input, output, counts);
      std::vector<at::Tensor> parts;
      for (int r = 0; r < b.size(); ++r) parts.push_back(at::full({counts[r]}, r + 1, dtype));
      EXPECT_TRUE(at::equal(output, at::cat(parts))) << dtype;
    }
  }
}

TEST_F(MpiWorld, ReduceScatterUneven) {
  auto& b = *backend_;
  for (auto dtype : kReduceTypes) {
    for (auto counts : {uneven_counts(b.size()), std::vector<int64_t>(b.size(), 100)}) {
      int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
      auto input = rank_input(total, b.rank(), dtype);
      auto output = at::zeros({counts[b.rank()]}, dtype);
      b.reduce_scatter(input, output, counts, ReduceOp::kSum);
      int64_t offset = std::accumulate(counts.begin(), counts.begin() + b.rank(), int64_t{0});
      auto expect = expected_sum(total, b.size(), dtype).narrow(0, offset, counts[b.rank()]);
      EXPECT_TRUE(at::equal(output, expect)) << dtype;
    }
  }
}

TEST_F(MpiWorld, AllToAllUneven) {
  auto& b = *backend_;
  int n = b.size(), me = b.rank();
  // Rank i sends (i + j) % 3 elements of value 100 * i + j to rank j.
  auto count = [](int i, int j) { return static_cast<int64_t>((i + j) % 3); };
  for (auto dtype : kMoveTypes) {
    std::vector<int64_t> send_counts(n), recv_counts(n);
    std::vector<at::Tensor> send_parts, recv_parts;
    for (int j = 0; j < n; ++j) {
      send_counts[j] = count(me, j);
      recv_counts[j] = count(j, me);
      send_parts.push_back(at::full({send_counts[j]}, (100 * me + j) % 250, dtype));
      recv_parts.push_back(at::full({recv_counts[j]}, (100 * j + me) % 250, dtype));
    }
    auto expect = at::cat(recv_parts);
    auto output = at::zeros_like(expect);
    b.all_to_all(at::cat(send_parts), output, send_counts, recv_counts);
    EXPECT_TRUE(at::equal(output, expect)) << dtype;
  }
}

TEST_F(MpiWorld, SendRecvRingWithTagsConcurrently) {
  auto& b = *backend_;
  int next = (b.rank() + 1) % b.size(), prev = (b.rank() + b.size() - 1) % b.size();
  for (auto dtype : {at::kFloat, at::kHalf, at::kLong}) {
    // Two tags in flight at once, received in the opposite order, on the send and
    // receive threads the ProcessGroup would use.
    auto a = at::full({1000}, b.rank(), dtype), c = at::full({3}, b.rank() + 10, dtype);
    auto ra = at::zeros({1000}, dtype), rc = at::zeros({3}, dtype);
    std::thread sender([&] {
      EXPECT_NO_THROW({
        b.send(a, next, 1);
        b.send(c, next, 2);
      });
    });
    EXPECT_NO_THROW({
      b.recv(rc, prev, 2);
      b.recv(ra, prev, 1);
    });
    sender.join();
    EXPECT_TRUE(at::equal(ra, at::full({1000}, prev, dtype)));
    EXPECT_TRUE(at::equal(rc, at::full({3}, prev + 10, dtype)));
  }
  auto wrong = at::zeros({4}, at::kFloat);
  EXPECT_THROW(b.send(wrong, next, -1), CommError);
  b.barrier();
}

TEST_F(MpiWorld, SubgroupInReverseOrder) {
  auto& b = *backend_;
  // Group of the odd world ranks, in reverse order (group rank 0 = highest).
  std::vector<int> members;
  for (int r = b.size() - 1; r >= 0; --r)
    if (r % 2 == 1) members.push_back(r);
  if (b.rank() % 2 == 1) {
    auto sub = comm::make_mpi_backend(mpi_context(members, "odd"));
    EXPECT_EQ(sub->size(), static_cast<int>(members.size()));
    auto t = at::full({1}, b.rank(), at::kLong);
    std::vector<int64_t> counts(sub->size(), 1);
    auto out = at::zeros({sub->size()}, at::kLong);
    sub->all_gather(t, out, counts);
    EXPECT_TRUE(at::equal(out, at::tensor(std::vector<int64_t>(members.begin(), members.end()))));
    sub->all_reduce(t, ReduceOp::kSum);
    EXPECT_EQ(t.item<int64_t>(), std::accumulate(members.begin(), members.end(), int64_t{0}));
  }
  b.barrier();
}

TEST_F(MpiWorld, WrongRankMappingIsConfigError) {
  auto& b = *backend_;
  auto ctx = mpi_context(world_ranks(), "wrong");
  ctx.rank = (ctx.rank + 1) % ctx.size;  // claims another process's rank
  if (b.size() > 1) {
    EXPECT_THROW(comm::make_mpi_backend(ctx), ConfigError);
  }
}

// Last: a rank that joins late makes the others time out; it then joins, so the
// abandoned requests complete and the job ends cleanly.
TEST_F(MpiWorld, LateRankIsTimeoutError) {
  auto& b = *backend_;
  if (b.size() < 2) GTEST_SKIP();
  auto late = comm::make_mpi_backend(mpi_context(world_ranks(), "late", 0.3));
  auto t = at::ones({16}, at::kFloat);
  if (b.rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    late->all_reduce(t, ReduceOp::kSum);  // matches the others' abandoned requests
  } else {
    auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(late->all_reduce(t, ReduceOp::kSum), TimeoutError);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(s, 0.9);
  }
  b.barrier();
  late.reset();
}

}  // namespace
}  // namespace tessera::testing
