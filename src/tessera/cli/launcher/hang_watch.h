// HangWatch: the launcher's side of worker heartbeats (core/worker_heartbeat.h).
//
// Each worker of a round gets its own heartbeat file in a directory of the
// launcher (TESSERA_WORKER_HEARTBEAT_FILE). A worker that has beaten at least
// once and whose file then stays unchanged for `interval` seconds while its
// process is alive is hung (stuck in compute or deadlocked: a worker waiting
// for other ranks keeps beating): check() prints once, to stderr, which rank,
// pid and last heartbeat, and, when `shutdown` > 0 and the silence reaches it,
// returns the worker so the supervisor ends the round as a failure. A worker
// that never beats (a program that is not a Tessera trainer) is not watched.
//
// Not thread-safe; one per launcher, used by the supervisor's loop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/cli/launcher/worker_process.h"

namespace tessera::cli {

class HangWatch {
 public:
  // interval 0: off (no files, check() does nothing). Creates a private
  // directory under the system's temporary directory; removed by the destructor.
  HangWatch(double interval_s, double shutdown_s);
  ~HangWatch();
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  bool enabled() const { return interval_s_ > 0; }
  double interval() const { return interval_s_; }
  // The heartbeat file of global rank `rank` is file_prefix() + rank ("" when off).
  std::string file_prefix() const;
  std::string file_for(int rank) const;
  // Forgets the last round: removes every heartbeat file (call before starting workers).
  void new_round();

  // Index into `workers` of a hung worker to stop (shutdown > 0), else -1.
  // `reason` receives the sentence the failure summary prints.
  int check(const std::vector<std::unique_ptr<WorkerProcess>>& workers, std::string* reason);

 private:
  double interval_s_;
  double shutdown_s_;
  std::string dir_;
  std::vector<int> warned_;  // per worker index: 1 once named for the current silence
};

}  // namespace tessera::cli
