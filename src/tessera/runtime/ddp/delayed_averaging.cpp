#include "tessera/runtime/ddp/delayed_averaging.h"

#include "tessera/core/check.h"
#include "tessera/runtime/ddp/flat_params.h"

namespace tessera::runtime::ddp {

DelayedAveraging::DelayedAveraging(std::vector<at::Tensor> params,
                                   std::shared_ptr<comm::ProcessGroup> group)
    : group_(std::move(group)) {
  TS_CHECK(group_ != nullptr, "DelayedAveraging needs a process group");
  for (auto& same_dtype : group_by_dtype(params)) {
    groups_.emplace_back();
    groups_.back().params = std::move(same_dtype);
  }
}

void DelayedAveraging::begin_step() {
  at::NoGradGuard no_grad;
  for (auto& g : groups_) {
    g.before = flatten(g.params);
    // The first step after a synchronize (or ever): the ranks agree, so what
    // they hold is the consensus.
    if (!have_consensus_) g.consensus = g.before.clone();
  }
  have_consensus_ = true;
}

void DelayedAveraging::absorb_in_flight() {
  if (works_.empty()) return;
  for (size_t i = 0; i < groups_.size(); ++i) {
    works_[i]->wait();
    groups_[i].consensus.add_(groups_[i].reducing);
  }
  works_.clear();
  ++averages_;
}

void DelayedAveraging::end_step() {
  at::NoGradGuard no_grad;
  TS_CHECK(have_consensus_, "DelayedAveraging::end_step without begin_step");
  // This step's update, measured before anything else changes the parameters.
  for (auto& g : groups_) g.local = flatten(g.params).sub_(g.before);
  absorb_in_flight();
  for (auto& g : groups_) {
    unflatten_into(g.consensus + g.local, g.params);
    g.reducing = g.local.clone();
    works_.push_back(group_->all_reduce(g.reducing, comm::ReduceOp::kAvg));
  }
}

void DelayedAveraging::synchronize() {
  at::NoGradGuard no_grad;
  // The next begin_step takes the parameters as the consensus (they may be
  // replaced in between, by a checkpoint load).
  have_consensus_ = false;
  if (works_.empty()) return;
  absorb_in_flight();
  for (auto& g : groups_) unflatten_into(g.consensus, g.params);
}

}  // namespace tessera::runtime::ddp
