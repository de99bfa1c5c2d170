#include "tessera/comm/base/reduce_op.h"

#include "tessera/core/check.h"

namespace tessera::comm {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "?";
}

const char* to_string(OpType op) {
  switch (op) {
    case OpType::kAllReduce: return "all_reduce";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kAllGather: return "all_gather";
    case OpType::kReduceScatter: return "reduce_scatter";
    case OpType::kAllToAll: return "all_to_all";
    case OpType::kBarrier: return "barrier";
    case OpType::kSend: return "send";
    case OpType::kRecv: return "recv";
  }
  return "?";
}

ReduceOp parse_reduce_op(const std::string& name) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                      ReduceOp::kProduct}) {
    if (name == to_string(op)) return op;
  }
  TS_THROW(ConfigError, "unknown reduce op '", name, "': use sum, avg, min, max or product");
}

}  // namespace tessera::comm
