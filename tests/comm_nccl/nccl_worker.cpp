#include "nccl_worker.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "tessera/comm/backend_registry.h"
#include "tessera/comm/init.h"
#include "tessera/core/error.h"

namespace tessera::testing {
namespace {

using comm::ReduceOp;

const at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16, at::kHalf, at::kInt,
                                  at::kLong,  at::kByte,     at::kChar, at::kDouble};

at::TensorOptions cuda(at::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(at::kCUDA, c10::cuda::current_device());
}

// Small integers: exact in every dtype, and sums of 4 ranks stay inside int8.
at::Tensor values(int rank, int64_t n, ReduceOp op = ReduceOp::kSum) {
  at::Tensor i = at::arange(n, at::kDouble);
  if (op == ReduceOp::kProduct) return at::remainder(i + rank, 2) + 1;  // 1 or 2
  return at::remainder(i * 7 + rank * 3, 5) + 1;                        // 1..5
}

at::Tensor reduce_expected(int size, int64_t n, ReduceOp op, at::ScalarType dtype) {
  at::Tensor acc = values(0, n, op);
  for (int r = 1; r < size; ++r) {
    at::Tensor v = values(r, n, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc = acc + v;
        break;
      case ReduceOp::kProduct:
        acc = acc * v;
        break;
      case ReduceOp::kMin:
        acc = at::minimum(acc, v);
        break;
      case ReduceOp::kMax:
        acc = at::maximum(acc, v);
        break;
    }
  }
  if (op == ReduceOp::kAvg) {
    acc = at::isFloatingType(dtype) ? acc / size : at::trunc(acc / size);
  }
  return acc.to(dtype);
}

int failures = 0;

void check(const std::string& name, const at::Tensor& got, const at::Tensor& expected) {
  at::Tensor g = got.cpu().to(at::kDouble);
  at::Tensor e = expected.cpu().to(at::kDouble);
  const bool same_shape = g.sizes() == e.sizes();
  const bool ok = same_shape && at::allclose(g, e, /*rtol=*/1e-2, /*atol=*/1e-2);
  const double err = same_shape && g.numel() > 0 ? (g - e).abs().max().item<double>() : -1;
  std::cout << "CHECK " << name << (ok ? " PASS" : " FAIL") << " max_abs_err=" << err << std::endl;
  if (!ok) ++failures;
  EXPECT_TRUE(ok) << name;
}

void check_flag(const std::string& name, bool ok, const std::string& detail) {
  std::cout << "CHECK " << name << (ok ? " PASS " : " FAIL ") << detail << std::endl;
  if (!ok) ++failures;
  EXPECT_TRUE(ok) << name << ": " << detail;
}

std::string tag(const char* op, at::ScalarType dtype) {
  return std::string(op) + "/" + c10::toString(dtype);
}

void check_all_reduce(comm::ProcessGroup& g, at::ScalarType dtype) {
  const int64_t n = 1003;
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct, ReduceOp::kAvg}) {
    at::Tensor t = values(g.rank(), n, op).to(cuda(dtype));
    g.all_reduce(t, op)->wait();
    check(tag("all_reduce", dtype) + "/" + comm::to_string(op), t,
          reduce_expected(g.size(), n, op, dtype));
  }
}

void check_broadcast_and_gather(comm::ProcessGroup& g, at::ScalarType dtype) {
  const int root = g.size() - 1;
  at::Tensor b = values(g.rank(), 257).to(cuda(dtype));
  g.broadcast(b, root)->wait();
  check(tag("broadcast", dtype), b, values(root, 257).to(dtype));

  at::Tensor in = values(g.rank(), 37).to(cuda(dtype));
  std::vector<at::Tensor> outs;
  for (int r = 0; r < g.size(); ++r) outs.push_back(at::empty({37}, cuda(dtype)));
  g.all_gather(outs, in)->wait();
  for (int r = 0; r < g.size(); ++r) {
    check(tag("all_gather", dtype) + "/from" + std::to_string(r), outs[r], values(r, 37).to(dtype));
  }
  // Uneven shards: the first rank holds one element more.
  const int64_t total = g.size() * 10 + 1;
  std::vector<int64_t> counts = comm::shard_sizes(total, g.size());
  std::vector<at::Tensor> parts;
  for (int r = 0; r < g.size(); ++r) parts.push_back(values(r, counts[r]));
  at::Tensor gathered = at::empty({total}, cuda(dtype));
  g.all_gather_into(gathered, values(g.rank(), counts[g.rank()]).to(cuda(dtype)))->wait();
  check(tag("all_gather_uneven", dtype), gathered, at::cat(parts).to(dtype));
}

void check_reduce_scatter(comm::ProcessGroup& g, at::ScalarType dtype) {
  for (int64_t extra : {0, 3}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      const int64_t total = g.size() * 16 + extra;
      std::vector<int64_t> counts = comm::shard_sizes(total, g.size());
      int64_t offset = 0;
      for (int r = 0; r < g.rank(); ++r) offset += counts[r];
      at::Tensor out = at::empty({counts[g.rank()]}, cuda(dtype));
      g.reduce_scatter(out, values(g.rank(), total).to(cuda(dtype)), op)->wait();
      at::Tensor expected = reduce_expected(g.size(), total, op, dtype);
      check(tag("reduce_scatter", dtype) + (extra ? "_uneven/" : "/") + comm::to_string(op), out,
            expected.narrow(0, offset, counts[g.rank()]));
    }
  }
}

void check_all_to_all(comm::ProcessGroup& g, at::ScalarType dtype) {
  const int me = g.rank();
  // Rank r sends r + j + 1 elements of value 10 r + j to rank j: counts are
  // symmetric, so the input and output splits are the same list.
  std::vector<int64_t> splits;
  std::vector<at::Tensor> in_parts, out_parts;
  for (int j = 0; j < g.size(); ++j) {
    splits.push_back(me + j + 1);
    in_parts.push_back(at::full({me + j + 1}, 10.0 * me + j, at::kDouble));
    out_parts.push_back(at::full({me + j + 1}, 10.0 * j + me, at::kDouble));
  }
  at::Tensor in = at::cat(in_parts).to(cuda(dtype));
  at::Tensor out = at::empty({in.numel()}, cuda(dtype));
  g.all_to_all(out, in, splits, splits)->wait();
  check(tag("all_to_all_uneven", dtype), out, at::cat(out_parts).to(dtype));

  at::Tensor even_in = values(me, g.size() * 8).to(cuda(dtype));
  at::Tensor even_out = at::empty({g.size() * 8}, cuda(dtype));
  g.all_to_all(even_out, even_in)->wait();
  std::vector<at::Tensor> expected;
  for (int j = 0; j < g.size(); ++j)
    expected.push_back(values(j, g.size() * 8).narrow(0, me * 8, 8));
  check(tag("all_to_all", dtype), even_out, at::cat(expected).to(dtype));
}

void check_send_recv(comm::ProcessGroup& g, at::ScalarType dtype) {
  const int next = (g.rank() + 1) % g.size();
  const int prev = (g.rank() + g.size() - 1) % g.size();
  at::Tensor out = values(g.rank(), 129).to(cuda(dtype));
  at::Tensor in = at::zeros({129}, cuda(dtype));
  auto sent = g.send(out, next);
  auto received = g.recv(in, prev);
  sent->wait();
  received->wait();
  check(tag("send_recv", dtype), in, values(prev, 129).to(dtype));
}

}  // namespace

namespace {

// The op must see what the caller queued on its own (non-default) stream just
// before: a long matmul chain delays the fill that sets the real input.
void check_caller_stream_order(comm::ProcessGroup& g) {
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  at::Tensor x = at::zeros({1 << 20}, cuda(at::kFloat));
  c10::cuda::device_synchronize();
  {
    c10::cuda::CUDAStreamGuard guard(side);
    at::Tensor m = at::randn({2048, 2048}, cuda(at::kFloat));
    for (int i = 0; i < 20; ++i) m = at::mm(m, m).clamp_(-1, 1);
    x.fill_(g.rank() + 1).add_(m.sum() * 0);
    g.all_reduce(x)->wait();
    // Read back on the caller's stream: ordered after the op by its end event.
    at::Tensor result = x.clone();
    side.synchronize();
    check("stream_order/caller_stream", result,
          at::full({1 << 20}, g.size() * (g.size() + 1) / 2.0));
  }
}

void check_shapes_and_groups(comm::ProcessGroup& g) {
  // Non-contiguous: the group copies to a flat buffer and back.
  at::Tensor base = values(g.rank(), 12 * 8).view({12, 8}).to(cuda(at::kFloat));
  at::Tensor t = base.t();
  g.all_reduce(t)->wait();
  check("all_reduce/non_contiguous", t.t(),
        reduce_expected(g.size(), 96, ReduceOp::kSum, at::kFloat).view({12, 8}));

  g.barrier()->wait();
  check_flag("barrier", true, "");

  auto sub = g.new_subgroup({0, 1});
  if (sub) {
    at::Tensor s = at::full({64}, g.rank() + 1.0, cuda(at::kFloat));
    sub->all_reduce(s)->wait();
    check("subgroup/all_reduce", s, at::full({64}, 3.0));
    sub->shutdown();
  }
  check_flag("subgroup/membership", (sub != nullptr) == (g.rank() < 2), "");

  // The CPU tensor check happens when the op is queued and leaves the group usable.
  bool refused = false;
  try {
    g.all_reduce(at::ones({4}));
  } catch (const ConfigError& e) {
    refused = std::string(e.what()).find("nccl") != std::string::npos;
  }
  check_flag("refuses_cpu_tensor", refused, "");
}

void check_device_spec(comm::ProcessGroup& g) {
  const std::string cpu = comm::has_backend("gloo") ? "gloo" : "shm";
  comm::ProcessGroupOptions o = comm::ProcessGroupOptions::from_env("spec");
  o.backend = "cpu:" + cpu + ",cuda:nccl";
  comm::ProcessGroup spec(g.store(), g.rank(), g.size(), o);
  at::Tensor on_cpu = at::full({16}, g.rank() + 1.0);
  at::Tensor on_gpu = at::full({16}, g.rank() + 1.0, cuda(at::kFloat));
  spec.all_reduce(on_cpu)->wait();
  spec.all_reduce(on_gpu)->wait();
  const double sum = g.size() * (g.size() + 1) / 2.0;
  check("device_spec/" + cpu + "_cpu", on_cpu, at::full({16}, sum));
  check("device_spec/nccl_cuda", on_gpu, at::full({16}, sum));
  spec.shutdown();
}

// Last: a failed collective breaks its group, so it gets a group of its own.
void check_unsupported_dtype(comm::ProcessGroup& g) {
  comm::ProcessGroupOptions o = comm::ProcessGroupOptions::from_env("dtype-errors");
  o.backend = "nccl";
  comm::ProcessGroup errors(g.store(), g.rank(), g.size(), o);
  std::string what;
  try {
    errors.all_reduce(at::ones({4}, cuda(at::kBool)))->wait();
  } catch (const CommError& e) {
    what = e.what();
  }
  check_flag("unsupported_dtype/bool",
             what.find("does not support dtype Bool") != std::string::npos,
             "'" + what.substr(0, 160) + "'");
  errors.shutdown();
}

}  // namespace

void run_nccl_collective_checks(comm::ProcessGroup& group) {
  for (at::ScalarType dtype : kDtypes) {
    check_all_reduce(group, dtype);
    check_broadcast_and_gather(group, dtype);
    check_reduce_scatter(group, dtype);
    check_all_to_all(group, dtype);
    check_send_recv(group, dtype);
  }
  check_caller_stream_order(group);
  check_shapes_and_groups(group);
  check_device_spec(group);
  check_unsupported_dtype(group);
  std::cout << "RANK " << group.rank() << " checks failed: " << failures << std::endl;
}

void run_nccl_bandwidth(comm::ProcessGroup& g) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const int64_t bytes = int64_t{256} << 20;
    at::Tensor t = at::ones({bytes / static_cast<int64_t>(c10::elementSize(dtype))}, cuda(dtype));
    for (int i = 0; i < 2; ++i) g.all_reduce(t)->wait();  // warm-up, connections
    g.barrier()->wait();
    const int iters = 5;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) g.all_reduce(t)->wait();
    c10::cuda::device_synchronize();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
    const double algbw = bytes / s / 1e9;
    const double busbw = algbw * 2.0 * (g.size() - 1) / g.size();
    if (g.rank() == 0) {
      std::cout << "BW tessera_nccl all_reduce " << c10::toString(dtype)
                << " 256MiB ranks=" << g.size() << " time_ms=" << s * 1e3 << " algbw_GBps=" << algbw
                << " busbw_GBps=" << busbw << std::endl;
    }
  }
}

void run_nccl_timeout_check(comm::ProcessGroup& g, double timeout_seconds) {
  at::Tensor t = at::ones({1024}, cuda(at::kFloat));
  g.all_reduce(t)->wait();  // #1: both ranks, so the communicator exists
  if (g.rank() != 0) {
    // Silent but alive: never joins #2, outlives rank 0's timeout.
    std::this_thread::sleep_for(std::chrono::duration<double>(timeout_seconds + 10));
    return;
  }
  auto start = std::chrono::steady_clock::now();
  std::string what;
  bool timeout_kind = false;
  try {
    g.all_reduce(t)->wait();  // #2
  } catch (const TimeoutError& e) {
    what = e.what();
    timeout_kind = true;
  } catch (const CommError& e) {
    what = e.what();
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The group's prefix: "all_reduce(float32[1024], sum) #2 in group 'default' (nccl, rank 0 of 2)".
  const bool names_op = what.find("all_reduce(") != std::string::npos &&
                        what.find(" #2 in group") != std::string::npos &&
                        what.find("rank 0 of 2") != std::string::npos;
  const bool in_time = took < timeout_seconds + 10;
  check_flag("timeout/silent_peer", timeout_kind && names_op && in_time,
             c10::str("after ", took, " s (timeout ", timeout_seconds, " s): '",
                      what.substr(0, 300), "'"));
}

// Runs as a rank process only (TESSERA_NCCL_TEST_MODE set by the parent test).
TEST(NcclWorker, Run) {
  const char* mode = std::getenv("TESSERA_NCCL_TEST_MODE");
  if (mode == nullptr) GTEST_SKIP() << "runs only inside a rank process of test_nccl_gpu";
  // Several ranks on one GPU: each must look like its own host to NCCL, set
  // before the first NCCL call (NCCL hashes it once per process).
  if (std::getenv("TESSERA_NCCL_TEST_HOSTID_PER_RANK") != nullptr) {
    setenv("NCCL_HOSTID", (std::string("tessera-nccl-rank-") + std::getenv("RANK")).c_str(), 1);
  }
  tessera::init();
  auto group = tessera::default_group();
  const std::string m = mode;
  if (m == "collectives") {
    run_nccl_collective_checks(*group);
    if (std::getenv("TESSERA_NCCL_TEST_BW") != nullptr) run_nccl_bandwidth(*group);
  } else if (m == "timeout") {
    run_nccl_timeout_check(*group, group->timeout().count() / 1000.0);
  } else {
    FAIL() << "unknown TESSERA_NCCL_TEST_MODE " << m;
  }
  tessera::shutdown();
}

}  // namespace tessera::testing
