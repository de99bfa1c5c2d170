// CommTrace: puts every communication operation of this process on the timeline
// (core/trace.h) while it lives: one span per operation from its start on the
// group's queue to its end, on a lane per group ("comm <group>"; sends and
// receives on "send <group>" / "recv <group>"), named after the op, with its
// bytes (what the caller handed over), the bytes this rank sent, the group's
// sequence number and how long it waited in the queue before it started.
//
// `rank` filters: only operations run for that global rank are recorded (ranks
// may be threads of one process); -1 records all.
//
// Thread safety: construct and destroy on one thread; the listener runs on the
// groups' queue threads.
#pragma once

namespace tessera::comm {

class CommTrace {
 public:
  explicit CommTrace(int rank = -1);
  ~CommTrace();
  CommTrace(const CommTrace&) = delete;
  CommTrace& operator=(const CommTrace&) = delete;

 private:
  int listener_ = 0;
};

}  // namespace tessera::comm
