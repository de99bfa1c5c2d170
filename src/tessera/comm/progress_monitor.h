// ProgressMonitor: publishes this rank's collective progress to the store and
// names the ranks a collective is waiting for.
//
// Every `interval` seconds a background thread writes
//   progress/<rank> = "<heartbeat> <last started seq> <last completed seq>"
// into the group's store namespace, and, when the current collective has waited
// longer than `stall_warn`, logs once which ranks have not joined it (Horovod's
// stall inspector idea). The cost is one store write per second per group.
//
// describe_missing() is called on the error path: it reads every rank's progress
// twice, 1.5 intervals apart, and reports ranks that have not started the failed
// collective and ranks whose heartbeat stopped (dead or hung).
//
// Thread safety: the thread only reads the atomics it is given; the store is
// thread-safe. Store failures inside the thread are logged once, never thrown.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tessera/comm/base/store.h"
#include "tessera/core/timer.h"

namespace tessera::comm {

// The counters a group updates as it runs collectives.
struct ProgressCounters {
  std::atomic<uint64_t> started{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<int64_t> started_at_ms{0};  // steady clock, when `started` began
};

class ProgressMonitor {
 public:
  ProgressMonitor(std::shared_ptr<Store> store, int rank, int size, double interval_s,
                  double stall_warn_s, const ProgressCounters* counters, std::string group_desc);
  ~ProgressMonitor();  // stops the thread within one interval

  // "" if nothing useful could be learned; otherwise a sentence naming ranks.
  static std::string describe_missing(Store& store, int self, int size, uint64_t seq,
                                      double interval_s);

  static int64_t steady_ms();

 private:
  void loop();
  void publish();
  void check_stall();

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  double interval_s_;
  double stall_warn_s_;
  const ProgressCounters* counters_;
  std::string group_desc_;
  uint64_t beat_ = 0;
  uint64_t warned_seq_ = 0;
  bool store_failed_logged_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tessera::comm
