// A process group carried through an autograd graph. AutogradContext stores
// only IValues, so the parallel layers' autograd functions (tensor, context and
// expert parallel) keep their group as an integer handle. The group must
// outlive every graph built with it: the mesh's groups do.
#pragma once

#include <cstdint>

#include "tessera/comm/process_group.h"

namespace tessera::parallel {

inline int64_t group_handle(comm::ProcessGroup& group) {
  return reinterpret_cast<int64_t>(&group);
}

inline comm::ProcessGroup& group_from_handle(int64_t handle) {
  return *reinterpret_cast<comm::ProcessGroup*>(handle);
}

}  // namespace tessera::parallel
