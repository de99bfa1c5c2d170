// NCCL backend logic that needs no GPU: dtype and reduce-op mapping, the
// registry entry, per-device backend specs, and a clean refusal where no CUDA
// device is visible. On a GPU machine the refusal tests check the opposite.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tessera/comm/backend_registry.h"
#include "tessera/comm/base/memory_store.h"
#include "tessera/comm/device_dispatch_backend.h"
#include "tessera/comm/nccl/nccl_backend.h"
#include "tessera/comm/nccl/nccl_types.h"
#include "tessera/core/error.h"
#include "testing/thread_ranks.h"

namespace tessera::comm {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(NcclTypes, MapsEverySupportedDtype) {
  EXPECT_EQ(nccl::to_nccl_dtype(at::kFloat), ncclFloat32);
  EXPECT_EQ(nccl::to_nccl_dtype(at::kDouble), ncclFloat64);
  EXPECT_EQ(nccl::to_nccl_dtype(at::kBFloat16), ncclBfloat16);
  EXPECT_EQ(nccl::to_nccl_dtype(at::kHalf), ncclFloat16);
  EXPECT_EQ(nccl::to_nccl_dtype(at::kInt), ncclInt32);
  EXPECT_EQ(nccl::to_nccl_dtype(at::kLong), ncclInt64);
  EXPECT_EQ(nccl::to_nccl_dtype(at::kByte), ncclUint8);
  EXPECT_EQ(nccl::to_nccl_dtype(at::kChar), ncclInt8);
  for (auto t : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong, at::kByte,
                 at::kChar}) {
    EXPECT_TRUE(nccl::supports_dtype(t)) << t;
  }
}

TEST(NcclTypes, UnsupportedDtypeIsCommErrorNamingIt) {
  for (auto t : {at::kBool, at::kShort, at::kComplexFloat}) {
    EXPECT_FALSE(nccl::supports_dtype(t));
    EXPECT_THROW(nccl::to_nccl_dtype(t), CommError) << t;
    std::string what = message_of([&] { nccl::to_nccl_dtype(t); });
    EXPECT_NE(what.find("backend nccl does not support dtype"), std::string::npos) << what;
    EXPECT_NE(what.find(c10::toString(t)), std::string::npos) << what;
  }
}

TEST(NcclTypes, MapsReduceOps) {
  EXPECT_EQ(nccl::to_nccl_op(ReduceOp::kSum, at::kInt), ncclSum);
  EXPECT_EQ(nccl::to_nccl_op(ReduceOp::kProduct, at::kFloat), ncclProd);
  EXPECT_EQ(nccl::to_nccl_op(ReduceOp::kMin, at::kHalf), ncclMin);
  EXPECT_EQ(nccl::to_nccl_op(ReduceOp::kMax, at::kByte), ncclMax);
  EXPECT_EQ(nccl::to_nccl_op(ReduceOp::kAvg, at::kBFloat16), ncclAvg);
  // Integer AVG is a sum plus a truncating division in the backend, never ncclAvg.
  EXPECT_THROW(nccl::to_nccl_op(ReduceOp::kAvg, at::kLong), CommError);
}

TEST(NcclTypes, DescribesResults) {
  EXPECT_NE(nccl::describe_result(ncclInvalidUsage).find("ncclInvalidUsage"), std::string::npos);
  EXPECT_NE(nccl::describe_result(ncclRemoteError).find("ncclRemoteError"), std::string::npos);
}

TEST(NcclRegistry, IsRegisteredUnderNccl) {
  EXPECT_TRUE(has_backend("nccl"));
  auto names = available_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "nccl"), names.end());
}

BackendContext single_rank_context() {
  BackendContext ctx;
  ctx.store = std::make_shared<MemoryStore>();
  ctx.global_ranks = {0};
  ctx.timeout = std::chrono::seconds(5);
  return ctx;
}

TEST(NcclBackend, WithoutGpuCreationIsAClearConfigError) {
  if (nccl::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible";
  std::string what = message_of([] { create_backend("nccl", single_rank_context()); });
  EXPECT_NE(what.find("backend 'nccl' needs a CUDA device"), std::string::npos) << what;
  EXPECT_THROW(create_backend("nccl", single_rank_context()), ConfigError);
  // Through a ProcessGroup: the group names the backend it could not create.
  auto store = std::make_shared<MemoryStore>();
  ProcessGroupOptions options;
  options.backend = "nccl";
  options.heartbeat_interval = 0;
  std::string pg = message_of([&] { ProcessGroup group(store, 0, 1, options); });
  EXPECT_NE(pg.find("creating the 'nccl' backend"), std::string::npos) << pg;
}

TEST(NcclBackend, WithGpuTakesCudaTensorsOnly) {
  if (nccl::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: nothing to create";
  auto backend = create_backend("nccl", single_rank_context());
  EXPECT_EQ(backend->name(), "nccl");
  EXPECT_TRUE(backend->supports_device(c10::DeviceType::CUDA));
  EXPECT_FALSE(backend->supports_device(c10::DeviceType::CPU));
  EXPECT_TRUE(backend->supports_avg());
  at::Tensor cpu = at::ones({4});
  EXPECT_THROW(backend->all_reduce(cpu, ReduceOp::kSum), ConfigError);
}

TEST(DeviceSpec, Parses) {
  EXPECT_TRUE(is_device_spec("cpu:gloo,cuda:nccl"));
  EXPECT_FALSE(is_device_spec("nccl"));
  auto parts = parse_device_spec("cpu:gloo,cuda:nccl");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].first, c10::DeviceType::CPU);
  EXPECT_EQ(parts[0].second, "gloo");
  EXPECT_EQ(parts[1].first, c10::DeviceType::CUDA);
  EXPECT_EQ(parts[1].second, "nccl");
  for (const char* bad : {"cpu:", ":gloo", "gpu:nccl", "cpu:gloo,cpu:shm", "cpu:gloo,"}) {
    EXPECT_THROW(parse_device_spec(bad), ConfigError) << bad;
  }
  BackendContext ctx = single_rank_context();
  EXPECT_THROW(resolve_backend_name("cpu:nosuch,cuda:nccl", ctx), ConfigError);
  EXPECT_EQ(resolve_backend_name("cpu:auto,cuda:nccl", ctx), "cpu:auto,cuda:nccl");
}

// The CPU backend this build has for the cpu part of a spec.
std::string cpu_backend() { return has_backend("gloo") ? "gloo" : "shm"; }

TEST(DeviceSpec, RoutesCpuTensorsToTheCpuBackend) {
  const std::string spec = "cpu:" + cpu_backend() + ",cuda:nccl";
  testing::run_ranks(2, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto group = testing::make_group(rank, size, store, spec);
    EXPECT_EQ(group->backend_name(), spec);
    at::Tensor t = at::full({5}, rank + 1.0);
    group->all_reduce(t)->wait();
    EXPECT_TRUE(at::equal(t, at::full({5}, 3.0)));
    at::Tensor half = at::full({3}, rank + 0.5, at::kBFloat16);
    group->all_reduce(half, ReduceOp::kAvg)->wait();
    EXPECT_TRUE(at::equal(half, at::full({3}, 1.0, at::kBFloat16)));
    group->barrier()->wait();
    group->shutdown();
  });
}

TEST(DeviceSpec, WithoutGpuTheCudaPartIsLeftOut) {
  if (visible_cuda_devices() > 0) GTEST_SKIP() << "a CUDA device is visible";
  auto backend = create_backend("cpu:" + cpu_backend() + ",cuda:nccl", single_rank_context());
  EXPECT_TRUE(backend->supports_device(c10::DeviceType::CPU));
  EXPECT_FALSE(backend->supports_device(c10::DeviceType::CUDA));
  EXPECT_THROW(create_backend("cuda:nccl", single_rank_context()), ConfigError);
}

}  // namespace
}  // namespace tessera::comm
