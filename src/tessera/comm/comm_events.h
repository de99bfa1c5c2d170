// CommEvent: one finished communication operation, published to listeners.
//
// Every ProcessGroup of the process publishes an event for each operation it ran
// (collectives and point-to-point), on the queue thread that ran it, after the
// operation ended and before its Work is marked finished: a caller that waited
// for the Work sees the listeners' effects. The timeline (one trace span per op)
// and the comms logger (latency and bandwidth per op and size) are listeners.
//
// With no listener registered, publishing costs one relaxed atomic load.
// Listeners run on communication threads: they must be quick and must not throw
// (an exception is caught and logged once) or call into a ProcessGroup.
//
// Thread safety: add/remove and publish may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tessera/comm/base/reduce_op.h"
#include "tessera/comm/base/work.h"

namespace tessera::comm {

struct CommEvent {
  OpType op = OpType::kAllReduce;
  const std::string* group = nullptr;  // the group's name, valid during the call
  int group_rank = 0;
  int group_size = 1;
  int peer = -1;                 // send/recv: the other rank in the group; else -1
  uint64_t seq = 0;              // collectives: the group's sequence number; p2p: 0
  uint64_t payload_bytes = 0;    // what the caller handed over (all_gather: the output)
  uint64_t wire_bytes = 0;       // what this rank sends (comm_stats.h)
  WorkTimes times;               // finished_ns is the end of the operation
  bool ok = true;
};

using CommListener = std::function<void(const CommEvent&)>;

// Registers `listener` for every group of this process; returns an id for
// remove_comm_listener. Events of operations already running may arrive.
int add_comm_listener(CommListener listener);
// After it returns, `id`'s listener is no longer running and is never called again.
void remove_comm_listener(int id);
// True while some listener is registered.
bool comm_listeners_active();
// Calls every listener with `event`.
void publish_comm_event(const CommEvent& event);

}  // namespace tessera::comm
