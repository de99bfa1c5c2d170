// A shared library the Gloo isolation check (gloo_isolation.py) loads into a Python
// process that has imported PyTorch: it runs Tessera's Gloo backend there, beside
// LibTorch's own c10d Gloo, which lives in libtorch_cpu.so under the same gloo::
// names. Two ranks as threads over an in-memory store; the C entry point keeps the
// interface to Python plain.
#include <ATen/ATen.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tessera/comm/base/memory_store.h"
#include "tessera/comm/process_group.h"

namespace {

// Every rank all-reduces `numel` floats holding rank + 1 + i, `iterations` times;
// returns "" or what went wrong.
std::string run_two_ranks(int iterations, int64_t numel) {
  constexpr int kWorld = 2;
  auto store = std::make_shared<tessera::comm::MemoryStore>();
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        tessera::comm::ProcessGroupOptions opts;
        opts.backend = "gloo";
        opts.timeout = std::chrono::seconds(60);
        opts.heartbeat_interval = 0;  // ranks share a process
        tessera::comm::ProcessGroup pg(store, rank, kWorld, opts);
        const at::Tensor base = at::arange(numel, at::kFloat);
        for (int it = 0; it < iterations; ++it) {
          at::Tensor t = base + static_cast<float>(rank + 1 + it);
          pg.all_reduce(t, tessera::comm::ReduceOp::kSum)->wait();
          // Sum over ranks of (r + 1 + it + i) = 2i + 3 + 2it.
          const at::Tensor expect = base * 2 + static_cast<float>(3 + 2 * it);
          if (!at::equal(t, expect)) {
            errors[rank] = "iteration " + std::to_string(it) + ": wrong all_reduce result";
            return;
          }
        }
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    if (!errors[rank].empty()) return "rank " + std::to_string(rank) + ": " + errors[rank];
  }
  return "";
}

}  // namespace

// 0 on success; otherwise 1 and the error in `message` (at most `capacity` bytes).
extern "C" __attribute__((visibility("default"))) int tessera_gloo_probe(int iterations,
                                                                         long numel,
                                                                         char* message,
                                                                         int capacity) {
  const std::string error = run_two_ranks(iterations, numel);
  std::snprintf(message, static_cast<size_t>(capacity), "%s", error.c_str());
  return error.empty() ? 0 : 1;
}
