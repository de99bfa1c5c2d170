// Worker heartbeats to the launcher, so that `tessera run` can tell a worker
// that is hung (stuck in compute, deadlocked) from one that is working or
// waiting for others (docs/launcher.md, "Hung workers").
//
// Under `tessera run`, TESSERA_WORKER_HEARTBEAT_FILE names a file of this worker
// and TESSERA_WORKER_HEARTBEAT_INTERVAL the interval in seconds. The training
// thread calls beat() at its progress points (tessera train's steps, Engine
// backward and step); a beat rewrites the file (what the worker is doing, e.g.
// "step 12") at most four times per interval. While some thread blocks in a
// wait for other ranks (Waiting, used by Work::wait), a background thread beats
// for the process: a rank waiting for a late peer is the stall inspector's
// business, not a hang of its own. The launcher names a live worker whose file
// has not changed for one interval.
//
// Without TESSERA_WORKER_HEARTBEAT_FILE every call is a no-op costing one load
// of a static flag. Thread safety: every function may be called from any thread.
#pragma once

namespace tessera::heartbeat {

// True when this process sends heartbeats (it runs under `tessera run`).
bool enabled();

// The calling thread made progress; `what` (copied) says where, e.g. "step 12".
void beat(const char* what);

// While an object lives, a background thread beats "waiting: <what>" for the
// process at least four times per interval.
class Waiting {
 public:
  explicit Waiting(const char* what);
  ~Waiting();
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;

 private:
  bool active_;
};

}  // namespace tessera::heartbeat
