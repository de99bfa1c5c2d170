// CommStats: what a ProcessGroup has communicated on this rank, per op type:
// how many calls, and how many bytes this rank sent.
//
// Bytes are counted from what the group hands its backend (a float16 tensor
// upcast to float32 for a backend that cannot reduce float16 counts 4 bytes per
// element), as the bandwidth-optimal algorithms move them, which is also what
// busbw measures (reference/performance.md): for n ranks and B bytes,
//   all_reduce      2 (n - 1) / n * B
//   reduce_scatter  (n - 1) / n * B   (B: the whole input)
//   all_gather      (n - 1) / n * B   (B: the whole output)
//   broadcast       (n - 1) / n * B   (a ring's n - 1 forwards of B, per rank)
//   all_to_all      the bytes of the input that go to other ranks
//   send            B;  recv, barrier: 0
// so the count does not depend on the transport (shm copies, gloo's ring) and two
// strategies (DDP, ZeRO) compare by what they ask the network to carry.
//
// An op is counted when it is queued, in the caller's thread: a window measured
// around a training step holds every op the step issued, including one still
// travelling when the step returns (delayed averaging's).
//
// Busy time is the sum, over the ops that finished, of the time from their start
// on the group's queue to their end (Work::times_ns()): how long this rank's
// queues were occupied by the op type, which with a step's duration tells how
// much of the step communication took.
//
// A plain value; ProcessGroup::comm_stats() returns a snapshot.
#pragma once

#include <array>
#include <cstdint>

#include "tessera/comm/base/reduce_op.h"

namespace tessera::comm {

constexpr int kNumOpTypes = static_cast<int>(OpType::kRecv) + 1;

struct OpCounters {
  uint64_t calls = 0;
  uint64_t bytes = 0;
  uint64_t busy_ns = 0;  // start to end, summed over the finished ops
};

struct CommStats {
  std::array<OpCounters, kNumOpTypes> ops{};

  const OpCounters& operator[](OpType op) const { return ops[static_cast<int>(op)]; }
  OpCounters& operator[](OpType op) { return ops[static_cast<int>(op)]; }
  uint64_t total_bytes() const;
  uint64_t total_calls() const;
  uint64_t total_busy_ns() const;
  // Counters of `now` minus those of `before` (a window, e.g. one training step).
  static CommStats difference(const CommStats& now, const CommStats& before);
};

// Bytes this rank sends for `op` over `bytes` of payload in a group of `size`
// ranks (see above); for all_to_all, `bytes` is already what goes to the others.
uint64_t wire_bytes(OpType op, uint64_t bytes, int size);

}  // namespace tessera::comm
