#include "testing/thread_ranks.h"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/comm/base/memory_store.h"
#include "tessera/core/error.h"

namespace tessera::testing {

void run_ranks(int world_size, const RankBody& body) {
  auto store = std::make_shared<comm::MemoryStore>();
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      // Errors and log lines of this rank say "[rank r/w]", as in a real job.
      ScopedRankContext context(r, world_size);
      try {
        body(r, world_size, store);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

std::shared_ptr<comm::ProcessGroup> make_group(int rank, int size,
                                               std::shared_ptr<comm::Store> store,
                                               const std::string& backend,
                                               double timeout_seconds) {
  comm::ProcessGroupOptions opts;
  opts.backend = backend;
  opts.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  opts.heartbeat_interval = 0;  // threads share a process: no heartbeat thread per rank
  return std::make_shared<comm::ProcessGroup>(std::move(store), rank, size, opts);
}

}  // namespace tessera::testing
