// Reduction operators and collective kinds, shared by every backend.
#pragma once

#include <string>

namespace tessera::comm {

enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

enum class OpType {
  kAllReduce,
  kBroadcast,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBarrier,
  kSend,
  kRecv,
};

const char* to_string(ReduceOp op);
const char* to_string(OpType op);
// Parses "sum", "avg", "min", "max", "product" (ConfigError otherwise).
ReduceOp parse_reduce_op(const std::string& name);

}  // namespace tessera::comm
