// A Coordinator over a comm::ProcessGroup: all_gather of strings as two
// all_gathers (lengths, then bytes padded to the longest), barrier as the
// group's barrier. Every rank of the group must take part, in the group's
// collective order. Errors are the group's (CommError, TimeoutError).
#pragma once

#include <memory>

#include "tessera/checkpoint/coordinator.h"
#include "tessera/comm/process_group.h"

namespace tessera::checkpoint {

std::shared_ptr<Coordinator> make_group_coordinator(std::shared_ptr<comm::ProcessGroup> group);

}  // namespace tessera::checkpoint
