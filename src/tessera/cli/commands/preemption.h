// Preemption of `tessera train` (docs/train.md, "Preemption"): SIGTERM or SIGINT
// (what a scheduler, `tessera run` or Ctrl-C sends) no longer kills the process
// at once. The handler only records the signal; the training loop asks after
// every step whether any rank got one (a collective, so that all ranks stop at
// the same step), writes a checkpoint and exits with 128 + the signal, as a
// shell reports a process that a signal ended.
//
// A second signal while the first is being handled restores the default action
// and re-raises it: an impatient Ctrl-C still stops the process. The same signal
// again within 2 s counts as the first one delivered twice (Slurm signals every
// process of a job step while `tessera run` forwards its own copy), not as a
// second request.
//
// One object per process, on the thread that runs the loop; the previous
// handlers come back when it is destroyed.
#pragma once

#include <csignal>

namespace tessera::cli {

class PreemptionGuard {
 public:
  PreemptionGuard();
  ~PreemptionGuard();
  PreemptionGuard(const PreemptionGuard&) = delete;
  PreemptionGuard& operator=(const PreemptionGuard&) = delete;

  // The signal received (SIGTERM or SIGINT), 0 if none.
  static int received();

 private:
  struct sigaction previous_term_ {};
  struct sigaction previous_int_ {};
};

}  // namespace tessera::cli
