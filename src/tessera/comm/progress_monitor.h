// ProgressMonitor: publishes this rank's collective progress to the store and
// names the ranks a collective is waiting for.
//
// Every `interval` seconds a background thread writes
//   progress/<rank> = "<heartbeat> <last started seq> <last completed seq>"
// into the group's store namespace. It is also the stall inspector (Horovod's):
// when the current collective has waited longer than `stall_warn`, it logs once
// which collective this rank waits in (group, sequence number, op and shapes)
// and which ranks have not joined it; past `stall_shutdown` it hands the same
// sentence to `on_shutdown`, which fails the collective. The cost is one store
// write per interval per group.
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
#include <functional>
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
  // The signature of collective `started`, e.g. "all_reduce(float[1024], sum)".
  void set_signature(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu);
    signature = s;
  }
  std::string current_signature() const {
    std::lock_guard<std::mutex> lock(mu);
    return signature;
  }

 private:
  mutable std::mutex mu;
  std::string signature;
};

class ProgressMonitor {
 public:
  // `on_shutdown` (may be empty when stall_shutdown_s is 0) runs on the
  // monitor's thread with the description of the stalled collective.
  ProgressMonitor(std::shared_ptr<Store> store, int rank, int size, double interval_s,
                  double stall_warn_s, const ProgressCounters* counters, std::string group_desc,
                  double stall_shutdown_s = 0,
                  std::function<void(const std::string&)> on_shutdown = nullptr);
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
  uint64_t shutdown_seq_ = 0;
  double stall_shutdown_s_ = 0;
  std::function<void(const std::string&)> on_shutdown_;
  bool store_failed_logged_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tessera::comm
