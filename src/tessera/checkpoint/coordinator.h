// Coordinator: the two collective steps a checkpoint save needs — an all-gather of
// a small string from every rank, and a barrier — behind one interface, so the
// writer works over a ProcessGroup, over the rendezvous Store, or in one process.
//
//   * LocalCoordinator: world size 1, no communication.
//   * StoreCoordinator: keys in a Store (a TcpStore or, for ranks as threads, a
//     MemoryStore); waits are bounded by the store's timeout (StoreError).
//   * make_group_coordinator(group) (group_coordinator.h): the group's all_gather,
//     bounded by the group's timeout (CommError/TimeoutError).
//
// Contract: every rank calls the same sequence of all_gather/barrier calls.
// Each instance is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/base/store.h"

namespace tessera::checkpoint {

class Coordinator {
 public:
  virtual ~Coordinator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Blocking: returns every rank's `value`, indexed by rank, on every rank.
  virtual std::vector<std::string> all_gather(const std::string& value) = 0;
  // Blocking: returns once every rank has called it.
  virtual void barrier() { all_gather(std::string()); }
};

class LocalCoordinator : public Coordinator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> all_gather(const std::string& value) override { return {value}; }
};

// Keys live under `prefix` (give each job/writer its own); each call uses a new
// round number, and a round's keys are deleted once every rank has read them.
class StoreCoordinator : public Coordinator {
 public:
  StoreCoordinator(std::shared_ptr<comm::Store> store, int rank, int size,
                   std::string prefix = "tessera/ckpt");
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<std::string> all_gather(const std::string& value) override;

 private:
  std::shared_ptr<comm::Store> store_;
  int rank_;
  int size_;
  std::string prefix_;
  int64_t round_ = 0;
};

}  // namespace tessera::checkpoint
