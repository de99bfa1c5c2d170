// The shm backend's send/recv: messages larger than the ring (4 KB in these
// tests), tags received out of order, exchanges in both directions at once.
#include <gtest/gtest.h>

#include <thread>

#include "comm_shm/shm_test_util.h"

namespace tessera::comm {
namespace {

using testing::rank_data;
using testing::run_shm_ranks;

TEST(ShmP2P, ExchangeLargerThanTheRingBothWays) {
  run_shm_ranks(2, testing::small_options(), [](ShmBackend& b) {
    int peer = 1 - b.rank();
    // Both send first: the receive thread must drain while the send waits for space.
    at::Tensor out = rank_data(b.rank(), 20000, at::kFloat, 7);
    at::Tensor in = at::empty({20000}, at::kFloat);
    std::thread sender([&] { b.send(out, peer, 0); });
    b.recv(in, peer, 0);
    sender.join();
    EXPECT_TRUE(at::equal(in, rank_data(peer, 20000, at::kFloat, 7)));
  });
}

TEST(ShmP2P, TagsReceivedOutOfOrderAndZeroLength) {
  run_shm_ranks(3, testing::small_options(), [](ShmBackend& b) {
    if (b.rank() == 0) {
      for (int tag = 0; tag < 4; ++tag) {
        b.send(rank_data(tag, 100 * tag + 1, at::kLong, 8), 2, tag);
      }
      b.send(at::empty({0}, at::kFloat), 2, 9);
    } else if (b.rank() == 2) {
      at::Tensor empty = at::empty({0}, at::kFloat);
      b.recv(empty, 0, 9);  // sent last: the others are set aside in order
      for (int tag = 3; tag >= 0; --tag) {
        at::Tensor t = at::empty({100 * tag + 1}, at::kLong);
        b.recv(t, 0, tag);
        EXPECT_TRUE(at::equal(t, rank_data(tag, 100 * tag + 1, at::kLong, 8))) << "tag " << tag;
      }
    }
    b.barrier();
  });
}

TEST(ShmP2P, SizeMismatchIsAnError) {
  run_shm_ranks(2, testing::small_options(), [](ShmBackend& b) {
    if (b.rank() == 0) {
      b.send(at::zeros({10}, at::kFloat), 1, 5);
    } else {
      at::Tensor t = at::empty({11}, at::kFloat);
      EXPECT_THROW(b.recv(t, 0, 5), CommError);
    }
  });
}

TEST(ShmP2P, RingPingPongManyMessages) {
  run_shm_ranks(4, testing::small_options(), [](ShmBackend& b) {
    // A token goes around the ring 50 times, growing by one each hop.
    const int next = (b.rank() + 1) % b.size(), prev = (b.rank() + b.size() - 1) % b.size();
    at::Tensor token = at::zeros({300}, at::kInt);
    for (int lap = 0; lap < 50; ++lap) {
      if (b.rank() == 0) {
        b.send(token, next, 1);
        b.recv(token, prev, 1);
      } else {
        b.recv(token, prev, 1);
        token.add_(1);
        b.send(token, next, 1);
      }
    }
    if (b.rank() == 0) {
      EXPECT_EQ(token[299].item<int>(), 50 * (b.size() - 1));
    }
  });
}

}  // namespace
}  // namespace tessera::comm
