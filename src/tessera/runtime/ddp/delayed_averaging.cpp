#include "tessera/runtime/ddp/delayed_averaging.h"

#include <map>

#include "tessera/core/check.h"

namespace tessera::runtime::ddp {

DelayedAveraging::DelayedAveraging(std::vector<at::Tensor> params,
                                   std::shared_ptr<comm::ProcessGroup> group)
    : group_(std::move(group)) {
  TS_CHECK(group_ != nullptr, "DelayedAveraging needs a process group");
  std::map<at::ScalarType, size_t> index;
  for (auto& p : params) {
    auto [it, added] = index.emplace(p.scalar_type(), groups_.size());
    if (added) groups_.emplace_back();
    groups_[it->second].params.push_back(p.detach());
  }
}

at::Tensor DelayedAveraging::flatten(const DtypeGroup& g) const {
  std::vector<at::Tensor> parts;
  parts.reserve(g.params.size());
  for (const auto& p : g.params) parts.push_back(p.reshape({-1}));
  return at::cat(parts);
}

void DelayedAveraging::write(DtypeGroup& g, const at::Tensor& flat) {
  int64_t at = 0;
  for (auto& p : g.params) {
    p.copy_(flat.narrow(0, at, p.numel()).view(p.sizes()));
    at += p.numel();
  }
}

void DelayedAveraging::begin_step() {
  at::NoGradGuard no_grad;
  for (auto& g : groups_) {
    g.before = flatten(g);
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
  for (auto& g : groups_) g.local = flatten(g).sub_(g.before);
  absorb_in_flight();
  for (auto& g : groups_) {
    write(g, g.consensus + g.local);
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
  for (auto& g : groups_) write(g, g.consensus);
}

}  // namespace tessera::runtime::ddp
