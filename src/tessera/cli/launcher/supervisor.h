// Supervisor: watches the workers of one round of `tessera run` until all have
// exited, relaying their output and tearing the job down when it must end early.
//
// Teardown: when a worker exits non-zero or by a signal, or when the launcher
// receives SIGINT, SIGTERM or SIGHUP, every worker still running is sent a signal
// (SIGTERM after a failure; the launcher's own signal otherwise), then SIGKILL
// once the grace period has passed; a second launcher signal escalates to SIGKILL
// at once. After the last worker is reaped, each worker's process group is
// SIGKILLed so no helper process a worker started outlives the job.
//
// The supervisor installs handlers for SIGINT/SIGTERM/SIGHUP/SIGCHLD (a self-pipe
// wakes its poll loop) and ignores SIGPIPE, for the lifetime of the object;
// SIGINT/SIGHUP that were ignored on entry (a background job, nohup) stay ignored,
// as in a shell. One Supervisor per process; not thread-safe (signal handlers are
// process-wide).
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/cli/launcher/hang_watch.h"
#include "tessera/cli/launcher/output_relay.h"
#include "tessera/cli/launcher/worker_process.h"

namespace tessera::cli {

// How one worker ended.
struct WorkerReport {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int exit_code = -1;   // -1 when killed by a signal
  int term_signal = 0;  // 0 when it exited
  double seconds = 0;   // time alive
  bool stopped_by_launcher = false;  // still running when teardown began
  std::string hung;  // why the launcher stopped it as hung (hang_watch.h); "" otherwise
};

// How one round (one start of all local workers) ended.
struct RoundResult {
  bool success = false;     // every worker exited 0 and no signal arrived
  int launcher_signal = 0;  // first SIGINT/SIGTERM/SIGHUP the launcher got (0: none)
  int first_failure = -1;   // index into workers of the first failure (-1: none)
  double seconds = 0;       // duration of the round
  std::vector<WorkerReport> workers;  // in local-rank order
  // Why the round was stopped from outside (PeerWatch); "" when it was not.
  std::string stopped_by_peer;
};

// Something outside this node that can end a round: the other nodes of the job.
// `poll` is called about every `interval_seconds` while the round runs, teardown
// included (so it may send heartbeats); once it returns a non-empty reason, the
// workers are stopped as after a failure, and the reason is the round's.
struct PeerWatch {
  std::function<std::string()> poll;
  double interval_seconds = 0.5;
};

class Supervisor {
 public:
  explicit Supervisor(double grace_period_seconds);
  ~Supervisor();  // restores the previous signal dispositions
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Blocks until every worker has exited and its output is relayed (the output of
  // a helper that escaped its process group is waited for at most ~1 s). With a
  // `hang_watch`, a worker it finds hung past its shutdown time is the round's
  // failure, and the job is torn down as if it had failed.
  RoundResult supervise(std::vector<std::unique_ptr<WorkerProcess>>& workers,
                        OutputRelay& relay, HangWatch* hang_watch = nullptr,
                        const PeerWatch* peer_watch = nullptr);

  // How a child is asked to stop at teardown; by default its process group gets
  // the signal. (The hostfile launcher closes its agents' stdin instead, so each
  // agent stops its own workers and reports back before its ssh exits.)
  void set_stop_action(std::function<void(WorkerProcess&, int sig)> action);
  // Failures of up to `n` children are recorded but do not tear the round down
  // (an elastic job goes on without a lost host's agent). Default 0.
  void set_failures_tolerated(int n) { failures_tolerated_ = n; }

  // A SIGINT/SIGTERM/SIGHUP that arrived and was not yet consumed by supervise()
  // (checked between rounds); 0 when none.
  int take_pending_signal();

 private:
  double grace_period_;
  std::function<void(WorkerProcess&, int)> stop_action_;
  int failures_tolerated_ = 0;
};

}  // namespace tessera::cli
