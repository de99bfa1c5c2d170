#include "tessera/comm/comm_stats.h"

namespace tessera::comm {

uint64_t CommStats::total_bytes() const {
  uint64_t n = 0;
  for (const auto& o : ops) n += o.bytes;
  return n;
}

uint64_t CommStats::total_calls() const {
  uint64_t n = 0;
  for (const auto& o : ops) n += o.calls;
  return n;
}

uint64_t CommStats::total_busy_ns() const {
  uint64_t n = 0;
  for (const auto& o : ops) n += o.busy_ns;
  return n;
}

CommStats CommStats::difference(const CommStats& now, const CommStats& before) {
  CommStats d;
  for (int i = 0; i < kNumOpTypes; ++i) {
    d.ops[i].calls = now.ops[i].calls - before.ops[i].calls;
    d.ops[i].bytes = now.ops[i].bytes - before.ops[i].bytes;
    d.ops[i].busy_ns = now.ops[i].busy_ns - before.ops[i].busy_ns;
  }
  return d;
}

uint64_t wire_bytes(OpType op, uint64_t bytes, int size) {
  if (size <= 1) return 0;
  const uint64_t n = static_cast<uint64_t>(size);
  switch (op) {
    case OpType::kAllReduce: return 2 * (n - 1) * bytes / n;
    case OpType::kReduceScatter:
    case OpType::kAllGather:
    case OpType::kBroadcast: return (n - 1) * bytes / n;
    case OpType::kAllToAll:
    case OpType::kSend: return bytes;
    case OpType::kRecv:
    case OpType::kBarrier: return 0;
  }
  return 0;
}

}  // namespace tessera::comm
