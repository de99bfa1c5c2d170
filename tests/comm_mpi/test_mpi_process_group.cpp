// The mpi backend through the public API: tessera::init() under mpirun (which
// reads OMPI_COMM_WORLD_*) with backend "mpi", then every ProcessGroup op over
// every dtype, uneven and empty sizes, AVG, half types (reduced by the group over
// 16-bit words, rounded once: comm/collective_checks.h), p2p and subgroups. Outside mpirun only the "mpi needs mpirun" error is checked.
#include "comm/collective_checks.h"
#include "comm_mpi/mpi_test_util.h"
#include "tessera/comm/init.h"
#include "tessera/core/error.h"

namespace tessera::testing {
namespace {

using comm::ReduceOp;

const std::vector<at::ScalarType> kAllTypes = {at::kFloat, at::kDouble, at::kHalf,
                                               at::kBFloat16, at::kInt, at::kLong};

// Tears the default group down before MPI_Finalize runs at exit.
class ShutdownEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { tessera::shutdown(); }
};
const auto* kShutdown = ::testing::AddGlobalTestEnvironment(new ShutdownEnvironment);

TEST(MpiProcessGroup, InitWithMpiOutsideMpirunIsConfigError) {
  if (under_mpirun()) GTEST_SKIP() << "checks the plain-process case";
  InitOptions options;
  options.backend = "mpi";
  try {
    tessera::init(options);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun"), std::string::npos) << e.what();
  }
}

class MpiGroup : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_MPIRUN();
    InitOptions options;
    options.backend = "mpi";
    options.timeout_seconds = 20;
    tessera::init(options);
    g_ = default_group();
    ASSERT_EQ(g_->backend_name(), "mpi");
    ASSERT_EQ(g_->size(), mpi_world_size());
    ASSERT_EQ(g_->rank(), mpi_world_rank());
  }
  std::shared_ptr<comm::ProcessGroup> g_;
};

at::Tensor sum_of_inputs(int64_t n, int size, at::ScalarType dtype) {
  auto sum = at::zeros({n}, at::kLong);
  for (int r = 0; r < size; ++r) sum += rank_input(n, r, at::kLong);
  return sum.to(dtype);
}

TEST_F(MpiGroup, AllReduceEveryDtypeIncludingHalfAndAvg) {
  for (auto dtype : kAllTypes) {
    for (int64_t n : {0, 1, 1001}) {
      auto t = rank_input(n, g_->rank(), dtype).reshape({n, 1});
      g_->all_reduce(t)->wait();
      EXPECT_TRUE(at::equal(t.flatten(), sum_of_inputs(n, g_->size(), dtype)))
          << dtype << " n=" << n;
    }
  }
  auto t = at::full({8}, 2.0 * (g_->rank() + 1), at::kFloat);
  g_->all_reduce(t, ReduceOp::kAvg)->wait();
  EXPECT_TRUE(at::allclose(t, at::full({8}, g_->size() + 1.0, at::kFloat)));
}

TEST_F(MpiGroup, HalfTypesTravelAsSixteenBitsAndRoundOnce) {
  check_half_accuracy(*g_);
  check_half_wire(*g_);
}

TEST_F(MpiGroup, ReduceScatterAndAllGatherUneven) {
  int n = g_->size(), me = g_->rank();
  for (auto dtype : kAllTypes) {
    for (int64_t numel : {int64_t{0}, int64_t{n - 1}, int64_t{7 * n + 3}}) {
      auto shards = comm::shard_sizes(numel, n);
      int64_t offset = 0;
      for (int r = 0; r < me; ++r) offset += shards[r];
      auto out = at::zeros({shards[me]}, dtype);
      g_->reduce_scatter(out, rank_input(numel, me, dtype))->wait();
      EXPECT_TRUE(at::equal(out, sum_of_inputs(numel, n, dtype).narrow(0, offset, shards[me])))
          << dtype << " numel=" << numel;

      auto full = rank_input(numel, 0, dtype);
      auto gathered = at::zeros({numel}, dtype);
      g_->all_gather_into(gathered, full.narrow(0, offset, shards[me]).clone())->wait();
      EXPECT_TRUE(at::equal(gathered, full)) << dtype << " numel=" << numel;
    }
    std::vector<at::Tensor> outs;
    for (int r = 0; r < n; ++r) outs.push_back(at::zeros({2, 3}, dtype));
    g_->all_gather(outs, at::full({2, 3}, me + 1, dtype))->wait();
    for (int r = 0; r < n; ++r) EXPECT_TRUE(at::equal(outs[r], at::full({2, 3}, r + 1, dtype)));
  }
}

TEST_F(MpiGroup, BroadcastAndAllToAllWithSplits) {
  int n = g_->size(), me = g_->rank();
  for (auto dtype : kAllTypes) {
    int root = n - 1;
    auto t = me == root ? rank_input(300, root, dtype) : at::zeros({300}, dtype);
    g_->broadcast(t, root)->wait();
    EXPECT_TRUE(at::equal(t, rank_input(300, root, dtype))) << dtype;

    // Rank i sends j + 1 elements of value i to rank j.
    std::vector<int64_t> in_splits(n), out_splits(n);
    std::vector<at::Tensor> expect;
    for (int j = 0; j < n; ++j) {
      in_splits[j] = j + 1;
      out_splits[j] = me + 1;
      expect.push_back(at::full({me + 1}, j, dtype));
    }
    auto input = at::full({n * (n + 1) / 2}, me, dtype);
    auto output = at::zeros({n * (me + 1)}, dtype);
    g_->all_to_all(output, input, out_splits, in_splits)->wait();
    EXPECT_TRUE(at::equal(output, at::cat(expect))) << dtype;
  }
}

TEST_F(MpiGroup, SendRecvExchangeBothSendFirst) {
  int n = g_->size(), me = g_->rank();
  int peer = me ^ 1;
  if (peer >= n) GTEST_SKIP() << "odd rank out";
  // Above the eager limit, so only a non-waiting send() avoids a deadlock here.
  auto out = at::full({100000}, me, at::kFloat);
  auto in = at::zeros({100000}, at::kFloat);
  auto s = g_->send(out, peer, 7);
  auto r = g_->recv(in, peer, 7);
  s->wait();
  r->wait();
  EXPECT_TRUE(at::equal(in, at::full({100000}, peer, at::kFloat)));
}

TEST_F(MpiGroup, SubgroupOfEvenRanks) {
  int n = g_->size(), me = g_->rank();
  std::vector<int> evens;
  for (int r = 0; r < n; r += 2) evens.push_back(r);
  auto sub = g_->new_subgroup(evens, "mpi");
  if (me % 2 == 1) {
    EXPECT_EQ(sub, nullptr);
  } else {
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->rank(), me / 2);
    auto t = at::full({4}, me, at::kLong);
    sub->all_reduce(t)->wait();
    int64_t expect = 0;
    for (int r : evens) expect += r;
    EXPECT_TRUE(at::equal(t, at::full({4}, expect, at::kLong)));
    sub->shutdown();
  }
  g_->barrier()->wait();
}

}  // namespace
}  // namespace tessera::testing
