#include "tessera/parallel/expert/token_dispatcher_type.h"

#include "tessera/core/check.h"

namespace tessera::parallel {

TokenDispatcherType parse_token_dispatcher_type(const std::string& name) {
  if (name == "alltoall") return TokenDispatcherType::kAllToAll;
  if (name == "allgather") return TokenDispatcherType::kAllGather;
  TS_THROW(ConfigError, "moe_token_dispatcher_type must be alltoall or allgather, got '", name,
           "'");
}

}  // namespace tessera::parallel
