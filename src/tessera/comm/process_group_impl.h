// Private implementation of ProcessGroup (process_group.h): the queues, the
// sequence counter, error enrichment and the broken state. Not a public header.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/comm/base/backend.h"
#include "tessera/comm/base/prefix_store.h"
#include "tessera/comm/comm_stats.h"
#include "tessera/comm/process_group.h"
#include "tessera/comm/progress_monitor.h"
#include "tessera/comm/serial_executor.h"

namespace tessera::comm {

class ProcessGroupImpl {
 public:
  ProcessGroupImpl(std::shared_ptr<Store> root_store, int rank, int size,
                   ProcessGroupOptions options, std::vector<int> global_ranks);
  ~ProcessGroupImpl();

  // Queues a collective that hands `payload_bytes` to the backend (counted now,
  // comm_stats.h); `body` runs on the collective thread and may throw.
  WorkHandle enqueue_collective(OpType op, uint64_t payload_bytes, std::string signature,
                                std::function<void()> body);
  // Queues a send or receive on its own thread (not sequence-numbered).
  WorkHandle enqueue_p2p(OpType op, int peer, uint64_t payload_bytes, std::function<void()> body);

  void shutdown();
  std::string describe() const;
  CommStats comm_stats() const;  // "group 'default' (gloo, rank 0 of 4)"

  std::shared_ptr<Store> root_store_;
  std::shared_ptr<PrefixStore> store_;
  int rank_;
  int size_;
  ProcessGroupOptions options_;
  std::vector<int> global_ranks_;
  int context_rank_ = -1;   // rank context of errors raised by this group's ops
  int context_world_ = -1;
  std::string backend_name_;
  std::unique_ptr<Backend> backend_;
  std::atomic<uint64_t> seq_{0};
  ProgressCounters progress_;
  int subgroups_created_ = 0;
  std::array<std::atomic<uint64_t>, kNumOpTypes> calls_{};
  std::array<std::atomic<uint64_t>, kNumOpTypes> bytes_{};
  std::array<std::atomic<uint64_t>, kNumOpTypes> busy_ns_{};

 private:
  // Counts one call of `op` that hands `payload_bytes` to the backend; returns
  // the bytes this rank sends for it.
  uint64_t count(OpType op, uint64_t payload_bytes);
  // Adds the op's busy time, tells the listeners (comm_events.h), finishes `work`.
  void complete(const WorkHandle& work, OpType op, uint64_t seq, int peer, uint64_t payload_bytes,
                uint64_t wire, std::exception_ptr error);
  void run_collective(OpType op, uint64_t seq, uint64_t payload_bytes, uint64_t wire,
                      const std::string& signature, const std::function<void()>& body,
                      const WorkHandle& work);
  std::exception_ptr enrich(std::exception_ptr error, const std::string& what, uint64_t seq,
                            bool name_missing_ranks);
  std::exception_ptr broken() const;
  void set_broken(std::exception_ptr error);

  mutable std::mutex mu_;
  std::exception_ptr broken_;
  std::string stall_reason_;  // set by the stall inspector before it aborts the backend
  bool shut_down_ = false;
  // Shared so a Work's wait hook can reach its queue without outliving it.
  std::shared_ptr<SerialExecutor> collectives_;
  std::shared_ptr<SerialExecutor> sends_;
  std::shared_ptr<SerialExecutor> recvs_;
  std::unique_ptr<ProgressMonitor> monitor_;
};

// Rethrows `error` as the same Tessera error category with `prefix` in front of
// its message (TimeoutError stays TimeoutError; unknown exceptions become CommError).
std::exception_ptr with_context(std::exception_ptr error, const std::string& prefix,
                                const std::string& suffix = "");

}  // namespace tessera::comm
