// CommsLogger: latency and bandwidth of every communication operation, per op
// type and message size (DeepSpeed's comms_logger, with its config keys:
// enabled, verbose, prof_all, prof_ops).
//
// It listens to the ProcessGroups of this process (comm_events.h) while it
// lives. For each finished operation it records the time from its start on the
// group's queue to its end (the latency), the message size (the bytes the
// caller handed over: the whole tensor for all_reduce and broadcast, the whole
// output of all_gather, the whole input of reduce_scatter) and the bytes this
// rank sent (comm_stats.h). Per (op, size) the summary gives the count, total
// and mean latency, algbw = size / latency and busbw = algbw x the op's factor
// (all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n;
// broadcast, send, recv 1), the same definitions as `tessera bench` and
// nccl-tests (docs/collectives.md).
//
// Totals over every recorded op equal the groups' comm_stats() counters for the
// same window, once the ops have finished (the counters count at enqueue).
//
// `rank` filters: only operations run for that global rank are recorded (ranks
// may be threads of one process); -1 records all.
//
// Thread safety: summary() and reset() may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/comm/base/reduce_op.h"

namespace tessera::comm {

struct CommsLoggerOptions {
  bool enabled = false;
  bool verbose = false;   // log one line per operation as it finishes
  bool prof_all = true;   // record every op type; false: only prof_ops
  std::vector<std::string> prof_ops;  // op names, e.g. "all_reduce", "all_gather"
};

struct CommOpSummary {
  OpType op = OpType::kAllReduce;
  uint64_t message_bytes = 0;
  uint64_t count = 0;
  double total_ms = 0;
  double mean_ms = 0;
  double algbw_gbps = 0;  // GB/s (1e9 bytes), message_bytes / mean latency
  double busbw_gbps = 0;
  uint64_t wire_bytes = 0;  // total sent by this rank for these ops
};

struct CommSummary {
  std::vector<CommOpSummary> rows;  // by op type, then message size
  uint64_t total_count = 0;
  uint64_t total_wire_bytes = 0;
  double total_ms = 0;
  // A fixed-width table with a header line, one line per row and a total line.
  std::string table() const;
};

class CommsLogger {
 public:
  // ConfigError for an unknown name in prof_ops (listing the valid ones).
  explicit CommsLogger(CommsLoggerOptions options, int rank = -1);
  ~CommsLogger();
  CommsLogger(const CommsLogger&) = delete;
  CommsLogger& operator=(const CommsLogger&) = delete;

  CommSummary summary() const;
  void reset();

  // busbw / algbw for `op` in a group of `size` ranks.
  static double bus_factor(OpType op, int size);

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the listener
  int listener_ = 0;
};

}  // namespace tessera::comm
