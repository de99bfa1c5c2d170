#include "tessera/parallel/context/cp_comm_type.h"

#include "tessera/core/check.h"

namespace tessera::parallel {

CpCommType parse_cp_comm_type(const std::string& name) {
  if (name == "p2p") return CpCommType::kP2P;
  if (name == "a2a") return CpCommType::kAllToAll;
  if (name == "allgather") return CpCommType::kAllGather;
  TS_THROW(ConfigError, "cp_comm_type must be p2p (ring attention), a2a (all-to-all over ",
           "heads) or allgather, got '", name, "'");
}

std::string cp_comm_type_name(CpCommType type) {
  switch (type) {
    case CpCommType::kP2P: return "p2p";
    case CpCommType::kAllToAll: return "a2a";
    case CpCommType::kAllGather: return "allgather";
  }
  return "?";
}

}  // namespace tessera::parallel
