#include "comm_shm/shm_test_util.h"

#include <dirent.h>

#include <exception>

#include "testing/thread_ranks.h"

namespace tessera::comm::testing {

ShmOptions small_options() {
  ShmOptions o;
  o.slot_bytes = 768 * 8;  // 6 KB
  o.ring_bytes = 4096;
  o.small_bytes = 2048;
  return o;
}

void run_shm_ranks(int size, const ShmOptions& options,
                   const std::function<void(ShmBackend&)>& body, double timeout_s) {
  tessera::testing::run_ranks(size, [&](int r, int, std::shared_ptr<Store> store) {
    BackendContext ctx;
    ctx.store = store;
    ctx.rank = r;
    ctx.size = size;
    ctx.group_name = "test";
    ctx.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    for (int i = 0; i < size; ++i) ctx.global_ranks.push_back(i);
    ShmBackend backend(ctx, options);
    body(backend);
  });
}

at::Tensor rank_data(int rank, int64_t numel, at::ScalarType dtype, int seed) {
  at::Tensor i = at::arange(numel, at::kDouble);
  if (at::isIntegralType(dtype, false)) {
    return (i * 31 + rank * 17 + seed).remainder(23).sub(11).to(at::kLong).to(dtype);
  }
  return (i * 0.37 + rank * 1.3 + seed).sin().mul(0.45).add(1.0).to(dtype);
}

at::Tensor reference_reduce(const std::vector<at::Tensor>& inputs, ReduceOp op) {
  at::ScalarType dtype = inputs[0].scalar_type();
  bool half = dtype == at::kHalf || dtype == at::kBFloat16;
  auto acc_of = [&](const at::Tensor& t) { return half ? t.to(at::kFloat) : t.clone(); };
  at::Tensor acc = acc_of(inputs[0]);
  for (size_t r = 1; r < inputs.size(); ++r) {
    at::Tensor x = acc_of(inputs[r]);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc = acc + x;
        break;
      case ReduceOp::kProduct:
        acc = acc * x;
        break;
      case ReduceOp::kMin:
        acc = at::minimum(acc, x);
        break;
      case ReduceOp::kMax:
        acc = at::maximum(acc, x);
        break;
    }
  }
  if (op == ReduceOp::kAvg) {
    // Tensor / tensor: a plain IEEE division, as the backend does.
    at::Tensor n = at::full_like(acc, static_cast<int64_t>(inputs.size()));
    acc = at::isIntegralType(acc.scalar_type(), false) ? at::div(acc, n, "trunc") : acc / n;
  }
  return acc.to(dtype);
}

std::vector<std::string> segments_of(const std::vector<int>& pids) {
  std::vector<std::string> found;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return found;
  while (struct dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    for (int pid : pids) {
      std::string prefix = "tessera-" + std::to_string(pid) + "-";
      if (name.compare(0, prefix.size(), prefix) == 0) found.push_back(name);
    }
  }
  closedir(dir);
  return found;
}

}  // namespace tessera::comm::testing
