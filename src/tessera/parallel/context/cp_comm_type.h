// How context-parallel attention crosses its ranks (cp_comm_type, Megatron's
// names): p2p (ring attention), a2a (all-to-all over heads, DeepSpeed-Ulysses)
// or allgather. context_parallel.h describes each. Pure values, so the config
// parser names the choices without linking the attention.
#pragma once

#include <string>

namespace tessera::parallel {

enum class CpCommType { kP2P, kAllToAll, kAllGather };

// "p2p" | "a2a" | "allgather"; ConfigError naming the choices otherwise.
CpCommType parse_cp_comm_type(const std::string& name);
std::string cp_comm_type_name(CpCommType type);

}  // namespace tessera::parallel
