// ProcessGroup's own behaviour over the test-only store backend: flattening,
// non-contiguous inputs, half types (16-bit slices summed in float32), AVG, uneven shards, subgroups,
// sequence numbers, the broken state, missing-rank reports and debug checks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <thread>

#include "comm_pg/store_backend.h"
#include "tessera/comm/base/memory_store.h"
#include "tessera/comm/collective_check.h"
#include "tessera/comm/process_group.h"
#include "testing/thread_ranks.h"

namespace tessera::comm {
namespace {

using testing::run_ranks;

std::shared_ptr<ProcessGroup> group(int rank, int size, std::shared_ptr<Store> store,
                                    double timeout = 20, bool debug = false,
                                    double heartbeat = 0) {
  testing::register_store_backend();
  ProcessGroupOptions o;
  o.backend = "store";
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  o.debug_detail = debug;
  o.heartbeat_interval = heartbeat;
  o.stall_warn = 0;
  return std::make_shared<ProcessGroup>(std::move(store), rank, size, o);
}

TEST(ShardSizes, FirstShardsTakeTheRemainder) {
  EXPECT_EQ(shard_sizes(7, 3), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(shard_sizes(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(shard_sizes(0, 2), (std::vector<int64_t>{0, 0}));
}

TEST(ProcessGroup, AllReduceOpsOnNonContiguousAndHalfTensors) {
  run_ranks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = group(rank, size, store);
    // A transposed (non-contiguous) view: results must land in the user's tensor.
    at::Tensor base = at::arange(6, at::kFloat).view({2, 3}).add(rank);
    at::Tensor t = base.t();
    pg->all_reduce(t, ReduceOp::kSum)->wait();
    EXPECT_TRUE(at::equal(base, at::arange(6, at::kFloat).view({2, 3}).mul(3).add(3)));

    at::Tensor avg = at::full({5}, static_cast<double>(rank), at::kDouble);
    pg->all_reduce(avg, ReduceOp::kAvg)->wait();
    EXPECT_TRUE(at::allclose(avg, at::full({5}, 1.0, at::kDouble)));

    at::Tensor iavg = at::full({4}, rank + 1, at::kInt);  // (1+2+3)/3 = 2
    pg->all_reduce(iavg, ReduceOp::kAvg)->wait();
    EXPECT_TRUE(at::equal(iavg, at::full({4}, 2, at::kInt)));

    // 1000 x 0.1 in half precision: float32 accumulation keeps the sum accurate.
    at::Tensor h = at::full({1000}, 0.1, at::kHalf);
    pg->all_reduce(h, ReduceOp::kSum)->wait();
    EXPECT_NEAR(h.to(at::kFloat).sum().item<float>(), 300.0f, 0.5f);

    at::Tensor mx = at::tensor({rank, -rank}, at::kLong);
    pg->all_reduce(mx, ReduceOp::kMax)->wait();
    EXPECT_TRUE(at::equal(mx, at::tensor({2, 0}, at::kLong)));
    EXPECT_EQ(pg->sequence_number(), 5u);
  });
}

TEST(ProcessGroup, UnevenGatherAndScatterAndSubgroups) {
  run_ranks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = group(rank, size, store);
    at::Tensor full = at::arange(7, at::kFloat);  // shards 3, 2, 2
    auto counts = shard_sizes(7, size);
    int64_t offset = 0;
    for (int r = 0; r < rank; ++r) offset += counts[r];
    at::Tensor mine = full.narrow(0, offset, counts[rank]).clone();
    at::Tensor gathered = at::zeros({7});
    pg->all_gather_into(gathered, mine)->wait();
    EXPECT_TRUE(at::equal(gathered, full));

    at::Tensor out = at::zeros({counts[rank]});
    pg->reduce_scatter(out, full, ReduceOp::kSum)->wait();
    EXPECT_TRUE(at::equal(out, mine.mul(3)));

    std::vector<at::Tensor> list = {at::zeros({2}), at::zeros({2}), at::zeros({2})};
    pg->all_gather(list, at::full({2}, static_cast<double>(rank)))->wait();
    for (int r = 0; r < size; ++r) EXPECT_EQ(list[r][1].item<float>(), r);

    auto sub = pg->new_subgroup({0, 2});
    EXPECT_EQ(sub == nullptr, rank == 1);
    if (sub) {
      EXPECT_EQ(sub->size(), 2);
      EXPECT_EQ(sub->global_ranks(), (std::vector<int>{0, 2}));
      at::Tensor s = at::full({1}, static_cast<double>(rank));
      sub->all_reduce(s)->wait();
      EXPECT_EQ(s.item<float>(), 2.0f);
    }
  });
}

TEST(ProcessGroup, InvalidArgumentsAreConfigErrors) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = group(rank, size, store);
    EXPECT_THROW(pg->broadcast(at::zeros({1}), 5), ConfigError);
    EXPECT_THROW(pg->reduce_scatter(at::zeros({3}), at::zeros({4})), ConfigError);
    EXPECT_THROW(pg->all_to_all(at::zeros({3}), at::zeros({3})), ConfigError);
    EXPECT_THROW(pg->send(at::zeros({1}), rank), ConfigError);
    EXPECT_THROW(pg->all_gather({at::zeros({1})}, at::zeros({1})), ConfigError);
  });
}

TEST(ProcessGroup, DebugDetailNamesBothSidesOfAMismatch) {
  std::vector<std::string> messages(2);
  run_ranks(2, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = group(rank, size, store, 10, /*debug=*/true);
    at::Tensor t = at::ones({4});
    pg->all_reduce(t)->wait();  // matching: passes the check
    try {
      if (rank == 0) {
        pg->all_reduce(at::ones({4}))->wait();
      } else {
        pg->broadcast(at::ones({4}), 0)->wait();
      }
    } catch (const CollectiveMismatchError& e) {
      messages[rank] = e.what();
    }
    // The group is broken now: later ops fail fast with the first error.
    EXPECT_THROW(pg->barrier()->wait(), CommError);
  });
  for (const auto& m : messages) {
    EXPECT_NE(m.find("collective mismatch at #2"), std::string::npos) << m;
    EXPECT_NE(m.find("all_reduce(Float[4], sum)"), std::string::npos) << m;
    EXPECT_NE(m.find("broadcast(Float[4], root=0)"), std::string::npos) << m;
  }
}

TEST(ProcessGroup, StalledRankIsNamedWithinTheTimeout) {
  std::string message;
  double waited = 0;
  run_ranks(3, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = group(rank, size, store, /*timeout=*/2, false, /*heartbeat=*/0.2);
    at::Tensor t = at::ones({2});
    pg->all_reduce(t)->wait();
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::seconds(4));  // stalls past the timeout
      return;
    }
    auto start = std::chrono::steady_clock::now();
    try {
      pg->all_reduce(t)->wait();
      ADD_FAILURE() << "the collective should have failed";
    } catch (const tessera::Error& e) {
      if (rank == 0) {
        message = e.what();
        waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    }
  });
  EXPECT_NE(message.find("all_reduce(Float[2], sum) #2 in group 'default'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("rank 2 has not joined #2"), std::string::npos) << message;
  EXPECT_LT(waited, 4.0);
}

// Fix from review: tensors on a device the backend cannot reach (CUDA on a CPU
// backend) were accepted. A meta tensor stands in for a GPU one on a CPU-only host.
TEST(ProcessGroup, TensorsOnAnotherDeviceAreRefusedNamingBackendAndDevice) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = group(rank, size, store);
    const at::Tensor meta = at::empty({4}, at::TensorOptions().device(at::kMeta));
    try {
      pg->all_reduce(meta);
      ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("all_reduce: tensor is on device meta but backend "
                                           "'store' takes CPU tensors only"),
                std::string::npos) << e.what();
    }
    EXPECT_THROW(pg->broadcast(meta, 0), ConfigError);
    EXPECT_THROW(pg->all_gather_into(at::empty({8}, meta.options()), at::zeros({4})), ConfigError);
    EXPECT_THROW(pg->send(meta, 1 - rank), ConfigError);
    at::Tensor t = at::ones({2});
    pg->all_reduce(t)->wait();  // the group is still usable
    EXPECT_EQ(t[0].item<float>(), 2.0f);
  });
}

// Fix from review: with ranks as threads, errors raised inside a group's ops
// carried the process-wide rank context, the same for every rank.
TEST(ProcessGroup, ErrorsOfAnOpNameTheRankThatRanIt) {
  set_rank_context(0, 2);  // one process-wide context, as init() sets it
  auto store = std::make_shared<MemoryStore>();
  std::string message;
  std::thread ranks[2];
  std::shared_ptr<ProcessGroup> groups[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r] = std::thread([&, r] { groups[r] = group(r, 2, store, /*timeout=*/0.5); });
  }
  for (auto& t : ranks) t.join();
  // Rank 1 waits for a message rank 0 never sends.
  at::Tensor t = at::zeros({1});
  try {
    groups[1]->recv(t, 0)->wait();
  } catch (const tessera::Error& e) {
    message = e.what();
  }
  groups[0]->shutdown();
  groups[1]->shutdown();
  set_rank_context(-1, -1);
  EXPECT_EQ(message.rfind("[rank 1/2] ", 0), 0u) << message;
}

}  // namespace
}  // namespace tessera::comm
