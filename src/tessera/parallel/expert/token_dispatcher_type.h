// How an MoE layer sends tokens to experts on other ranks
// (moe_token_dispatcher_type, Megatron's names): alltoall or allgather;
// expert_parallel.h describes each. Pure values, so the config parser names
// the choices without linking the dispatchers.
#pragma once

#include <string>

namespace tessera::parallel {

enum class TokenDispatcherType { kAllToAll, kAllGather };

// "alltoall" | "allgather"; ConfigError naming the choices otherwise.
TokenDispatcherType parse_token_dispatcher_type(const std::string& name);

}  // namespace tessera::parallel
