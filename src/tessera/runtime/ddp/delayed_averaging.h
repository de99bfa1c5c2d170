// Delayed averaging (data_parallel.staleness 1): asynchronous data parallelism
// with a staleness bound of one step, in which communication never waits for
// computation nor computation for communication.
//
// Each rank steps its optimizer on its own gradients, as in local SGD; the
// change that step made to the parameters (the update u_t) is all-reduced in
// the background while the next step's forward and backward run, and when that
// step ends its own update is kept and u_t is swapped for the average of every
// rank's u_t. So after step t every rank holds
//
//     consensus_t + u_t(rank),   consensus_t = w_0 + sum over s < t of avg(u_s),
//
// the consensus bitwise equal on every rank (the same sums of the same all-reduce
// results), the ranks apart by their latest local update only. With plain SGD
// this is delayed gradient averaging (Zhu et al., 2021): avg(u_s) = -lr avg(g_s).
// Under Adam the correction is made on the updates rather than the gradients so
// that the replicas cannot drift apart: a gradient correction goes through each
// rank's own moments, which differ. Each rank's optimizer moments see its own
// gradients only (as in local SGD).
//
// Contract: begin_step() just before the optimizer step, end_step() just after
// (collective: it launches an all_reduce); synchronize() (collective) waits for
// the update in flight and sets every rank to the consensus, after which all
// parameters agree bitwise (checkpoints and the end of training call it).
// Parameters of several dtypes are averaged per dtype. Not thread safe.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "tessera/comm/process_group.h"

namespace tessera::runtime::ddp {

class DelayedAveraging {
 public:
  DelayedAveraging(std::vector<at::Tensor> params, std::shared_ptr<comm::ProcessGroup> group);

  // Records the parameters as the optimizer finds them.
  void begin_step();
  // Keeps this step's update, replaces the previous one by its average across
  // ranks (waiting for it if it is still travelling) and sends this one.
  void end_step();
  // Collective: every rank's parameters := the consensus including the update in
  // flight (nothing changes when nothing is in flight); the next begin_step
  // starts afresh from the parameters it finds.
  void synchronize();

  // Whether an update is travelling (end_step ran since the last synchronize).
  bool in_flight() const { return !works_.empty(); }
  // How many averages have been applied (one per end_step after the first).
  int64_t averages() const { return averages_; }
  // The consensus parameters of dtype group `i`, laid end to end (tests).
  const at::Tensor& consensus(size_t i) const { return groups_.at(i).consensus; }
  size_t num_dtype_groups() const { return groups_.size(); }

 private:
  struct DtypeGroup {
    std::vector<at::Tensor> params;
    at::Tensor consensus;  // w_0 + the averages applied so far
    at::Tensor before;     // the parameters before this step's update
    at::Tensor local;      // this rank's last update, still in the parameters
    at::Tensor reducing;   // the buffer the all_reduce works on
  };
  // Waits for the update in flight and adds its average to the consensus.
  void absorb_in_flight();

  std::shared_ptr<comm::ProcessGroup> group_;
  std::vector<DtypeGroup> groups_;
  std::vector<comm::WorkHandle> works_;  // one per dtype group, empty when none
  bool have_consensus_ = false;
  int64_t averages_ = 0;
};

}  // namespace tessera::runtime::ddp
