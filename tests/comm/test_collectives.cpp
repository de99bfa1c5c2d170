// The collective suite: every backend that constructs with ranks as threads x
// world size 1..4, every op through ProcessGroup, checked against references
// computed locally from every rank's deterministic input. One group per
// (backend, world size) runs all cases, which keeps the binary fast.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>

#include "comm/collective_checks.h"
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

class CollectiveSuite : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CollectiveSuite, EveryOpMatchesReference) {
  const auto& [backend, world] = GetParam();
  std::string reason = skip_reason(backend);
  if (!reason.empty()) GTEST_SKIP() << reason;
  std::atomic<int> arrived{0};
  run_ranks(world, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto g = make_group(rank, size, store, backend, 20);
    EXPECT_EQ(g->backend_name(), backend);
    check_all_reduce(*g, {kDtypes, kSizes, kOps});
    check_half_accuracy(*g);
    check_broadcast(*g, {{at::kFloat, at::kLong, at::kBFloat16}, kSizes, {}});
    check_all_gather(*g, {{at::kFloat, at::kInt, at::kHalf}, kSizes, {}});
    check_reduce_scatter(*g, {{at::kFloat, at::kLong, at::kHalf, at::kBFloat16}, kSizes,
                              {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}});
    check_all_to_all(*g, {{at::kFloat, at::kLong}, {4}, {}});
    check_send_recv(*g, {{at::kFloat}, {7, 1001, 0}, {}});
    check_non_contiguous(*g);
    check_barrier(
        *g, [&] { arrived.fetch_add(1); }, [&] { return int64_t{arrived.load()}; });
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
