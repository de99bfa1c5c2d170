// The shm backend's collectives against local references, ranks as threads,
// world sizes 1..4, every reducible dtype and op, sizes from zero elements to
// many pipeline chunks (small_options(): 6 KB slots), bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include "comm_shm/shm_test_util.h"

namespace tessera::comm {
namespace {

using testing::rank_data;
using testing::reference_reduce;
using testing::run_shm_ranks;

const std::vector<at::ScalarType> kDtypes = {at::kFloat,    at::kDouble, at::kHalf,
                                             at::kBFloat16, at::kInt,    at::kLong};
const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                                    ReduceOp::kProduct};
// 0, 1, odd, small path, large path with several chunks and a ragged tail.
const std::vector<int64_t> kSizes = {0, 1, 37, 300, 5000, 12347};

std::string describe(at::ScalarType dtype, ReduceOp op, int64_t n, int size) {
  return c10::str(dtype, " ", to_string(op), " n=", n, " world=", size);
}

class ShmWorld : public ::testing::TestWithParam<int> {
 protected:
  void TearDown() override { EXPECT_TRUE(testing::segments_of({getpid()}).empty()); }
};

TEST_P(ShmWorld, AllReduceEveryDtypeOpAndSize) {
  run_shm_ranks(GetParam(), testing::small_options(), [](ShmBackend& b) {
    for (at::ScalarType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        for (int64_t n : kSizes) {
          std::vector<at::Tensor> inputs;
          for (int r = 0; r < b.size(); ++r) inputs.push_back(rank_data(r, n, dtype, 1));
          at::Tensor data = inputs[b.rank()].clone();
          b.all_reduce(data, op);
          EXPECT_TRUE(at::equal(data, reference_reduce(inputs, op)))
              << describe(dtype, op, n, b.size()) << " rank " << b.rank();
        }
      }
    }
  });
}

TEST_P(ShmWorld, ReduceScatterUnevenCounts) {
  run_shm_ranks(GetParam(), testing::small_options(), [](ShmBackend& b) {
    // Some ranks get nothing, one gets several slot regions.
    std::vector<int64_t> counts;
    for (int r = 0; r < b.size(); ++r) counts.push_back(r == 1 ? 0 : 700 * r + 3);
    int64_t total = 0, first = 0;
    for (int r = 0; r < b.size(); ++r) {
      if (r < b.rank()) first += counts[r];
      total += counts[r];
    }
    for (at::ScalarType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        std::vector<at::Tensor> inputs;
        for (int r = 0; r < b.size(); ++r) inputs.push_back(rank_data(r, total, dtype, 2));
        at::Tensor out = at::empty({counts[b.rank()]}, inputs[0].options());
        b.reduce_scatter(inputs[b.rank()], out, counts, op);
        at::Tensor expected = reference_reduce(inputs, op).narrow(0, first, counts[b.rank()]);
        EXPECT_TRUE(at::equal(out, expected)) << describe(dtype, op, total, b.size());
      }
    }
  });
}

TEST_P(ShmWorld, BroadcastFromEveryRoot) {
  run_shm_ranks(GetParam(), testing::small_options(), [](ShmBackend& b) {
    for (int root = 0; root < b.size(); ++root) {
      for (int64_t n : {int64_t(0), int64_t(5), int64_t(9001)}) {
        for (at::ScalarType dtype : {at::kFloat, at::kLong, at::kByte}) {
          at::Tensor data = rank_data(b.rank(), n, dtype, 3);
          b.broadcast(data, root);
          EXPECT_TRUE(at::equal(data, rank_data(root, n, dtype, 3)))
              << "root " << root << " n=" << n << " " << dtype;
        }
      }
    }
  });
}

TEST_P(ShmWorld, AllGatherUnevenCounts) {
  run_shm_ranks(GetParam(), testing::small_options(), [](ShmBackend& b) {
    for (int64_t scale : {int64_t(0), int64_t(1), int64_t(1500)}) {
      std::vector<int64_t> counts;
      std::vector<at::Tensor> parts;
      for (int r = 0; r < b.size(); ++r) {
        counts.push_back(r == 0 ? scale : scale * r + r);
        parts.push_back(rank_data(r, counts.back(), at::kDouble, 4));
      }
      at::Tensor out = at::full({at::cat(parts).numel()}, -1.0, at::kDouble);
      b.all_gather(parts[b.rank()], out, counts);
      EXPECT_TRUE(at::equal(out, at::cat(parts))) << "scale " << scale;
    }
  });
}

TEST_P(ShmWorld, AllToAllUnevenCounts) {
  run_shm_ranks(GetParam(), testing::small_options(), [](ShmBackend& b) {
    const int n = b.size();
    // count(i -> j): what rank i sends rank j; zero for some pairs, multi-chunk for others.
    auto count = [](int i, int j) { return static_cast<int64_t>(((i * 3 + j * 5) % 4) * 811); };
    auto block = [&](int i, int j) { return rank_data(i * 10 + j, count(i, j), at::kFloat, 5); };
    std::vector<int64_t> send_counts, recv_counts;
    std::vector<at::Tensor> send, expected;
    for (int j = 0; j < n; ++j) {
      send_counts.push_back(count(b.rank(), j));
      recv_counts.push_back(count(j, b.rank()));
      send.push_back(block(b.rank(), j));
      expected.push_back(block(j, b.rank()));
    }
    at::Tensor in = at::cat(send);
    at::Tensor out = at::zeros({at::cat(expected).numel()}, at::kFloat);
    b.all_to_all(in, out, send_counts, recv_counts);
    EXPECT_TRUE(at::equal(out, at::cat(expected)));
  });
}

TEST_P(ShmWorld, BarrierOrdersWrites) {
  static std::atomic<int> arrived{0};
  arrived = 0;
  run_shm_ranks(GetParam(), testing::small_options(), [](ShmBackend& b) {
    for (int round = 1; round <= 20; ++round) {
      arrived.fetch_add(1);
      b.barrier();
      EXPECT_GE(arrived.load(), round * b.size());
      b.barrier();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmWorld, ::testing::Values(1, 2, 3, 4));

// Default options: the 1 MB pipeline chunks of a real job, several of them.
TEST(ShmBackend, LargeAllReduceWithDefaultChunks) {
  run_shm_ranks(3, ShmOptions{}, [](ShmBackend& b) {
    const int64_t n = (3 << 20) / 4 + 1001;  // ~3 MB of float32
    std::vector<at::Tensor> inputs;
    for (int r = 0; r < b.size(); ++r) inputs.push_back(rank_data(r, n, at::kFloat, 6));
    at::Tensor data = inputs[b.rank()].clone();
    b.all_reduce(data, ReduceOp::kSum);
    EXPECT_TRUE(at::equal(data, reference_reduce(inputs, ReduceOp::kSum)));
  });
}

TEST(ShmBackend, UnsupportedDtypeNamesIt) {
  run_shm_ranks(2, testing::small_options(), [](ShmBackend& b) {
    at::Tensor t = at::zeros({4}, at::kByte);
    try {
      b.all_reduce(t, ReduceOp::kSum);
      ADD_FAILURE() << "all_reduce of uint8 should throw";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("does not support all_reduce"), std::string::npos);
    }
  });
}

}  // namespace
}  // namespace tessera::comm
