// The collective suite: every backend this build has x
// world size 1..4, every op through ProcessGroup, checked against references
// computed locally from every rank's deterministic input. One group per
// (backend, world size) runs all cases, which keeps the binary fast.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <atomic>

#include "comm/collective_checks.h"
#include "tessera/comm/backend_registry.h"
#include "tessera/core/check.h"
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

// Why `backend` cannot run with ranks as threads, or "" when it must: mpi runs one
// process per rank and nccl needs GPUs. Every other backend this build has must
// construct here; failing to is a test failure, never a skip (a broken shm or
// hierarchical backend must not read as "skipped").
std::string skip_reason(const std::string& backend) {
  if (backend == "mpi") return "mpi runs one process per rank, not threads";
  if (backend == "nccl") return "nccl needs GPUs";
  return "";
}

void run_suite(const std::string& backend, int world) {
  std::atomic<int> arrived{0};
  try {
    run_ranks(world, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
      auto g = make_group(rank, size, store, backend, 20);
      EXPECT_EQ(g->backend_name(), backend);
      check_all_reduce(*g, {kDtypes, kSizes, kOps});
      check_half_accuracy(*g);
      check_half_wire(*g);
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
  } catch (const std::exception& e) {
    ADD_FAILURE() << "backend '" << backend << "' is built but failed with " << world
                  << " thread ranks: " << e.what();
  }
}

// A backend that is registered but cannot be built fails the suite.
TEST(CollectiveSuiteSelf, ABackendThatDoesNotConstructFailsInsteadOfSkipping) {
  comm::register_backend("broken_for_test", [](const comm::BackendContext&)
                                                -> std::unique_ptr<comm::Backend> {
    TS_THROW(CommError, "this backend is broken on purpose");
  });
  EXPECT_TRUE(skip_reason("broken_for_test").empty());
  EXPECT_NONFATAL_FAILURE(run_suite("broken_for_test", 2), "is built but failed");
}

class CollectiveSuite : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CollectiveSuite, EveryOpMatchesReference) {
  const auto& [backend, world] = GetParam();
  const std::string reason = skip_reason(backend);
  if (!reason.empty()) GTEST_SKIP() << reason;
  run_suite(backend, world);
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
