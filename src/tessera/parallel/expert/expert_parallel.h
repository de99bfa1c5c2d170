// Expert parallelism: the experts of an MoE layer (models/moe.h) split over the
// ranks of an ep group — rank r holds experts [r E/ep, (r+1) E/ep) — and every
// token carried to the ranks of its experts and back.
//
//   auto layer = models::MoELayer(moe, hidden, bias, "tanh", E / ep, ep_rank * E / ep);
//   layer->set_dispatcher(std::make_shared<AllToAllDispatcher>(ep_group));
//
// Dispatchers (moe_token_dispatcher_type, Megatron's names):
//   alltoall   each rank sorts its routed tokens by destination, the ranks
//              exchange how many rows each sends each (an all-to-all of counts),
//              then the rows themselves with an uneven all-to-all
//              (all_to_all_v); the experts run, and the reverse all-to-all
//              brings the outputs home, where they are weighted and summed.
//   allgather  every rank gathers every rank's tokens and routing, runs its
//              experts on the tokens routed to them, and a reduce-scatter sums
//              each token's expert outputs back to its own rank.
// Both are autograd-transparent (the backward of an all-to-all is the reverse
// all-to-all; of an all-gather, a reduce-scatter). Every rank of the group
// calls the layer the same number of times in the same order (collectives),
// with the same token count per call for allgather.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/models/moe.h"
#include "tessera/parallel/expert/token_dispatcher_type.h"

namespace tessera::parallel {


// What a model's MoE layers need to split their experts over an ep group.
struct ExpertParallelOptions {
  std::shared_ptr<comm::ProcessGroup> group;  // nullptr: every expert on this rank
  TokenDispatcherType dispatcher = TokenDispatcherType::kAllToAll;
  bool enabled() const { return group != nullptr && group->size() > 1; }
  int size() const { return enabled() ? group->size() : 1; }
  int rank() const { return enabled() ? group->rank() : 0; }
};

// Rows [sum send_rows, ...] sent in order: send_rows[j] rows to rank j; returns
// [sum recv_rows, ...], recv_rows[j] rows from rank j. Differentiable (the
// backward sends the gradients back the same way). Every rank calls it with
// splits that agree (what j sends i is what i receives from j).
torch::Tensor all_to_all_v(const torch::Tensor& rows, const std::vector<int64_t>& send_rows,
                           const std::vector<int64_t>& recv_rows, comm::ProcessGroup& group);

// counts [n * c] int64: c numbers for each rank j; returns the c numbers each
// rank sent this one, [n * c] (an all-to-all of equal splits).
torch::Tensor exchange_counts(const torch::Tensor& counts, comm::ProcessGroup& group);

class AllToAllDispatcher : public models::TokenDispatcher {
 public:
  explicit AllToAllDispatcher(std::shared_ptr<comm::ProcessGroup> group)
      : group_(std::move(group)) {}
  torch::Tensor dispatch(const torch::Tensor& tokens, const models::Routing& routing,
                         models::ExpertsImpl& experts) override;

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
};

class AllGatherDispatcher : public models::TokenDispatcher {
 public:
  explicit AllGatherDispatcher(std::shared_ptr<comm::ProcessGroup> group)
      : group_(std::move(group)) {}
  torch::Tensor dispatch(const torch::Tensor& tokens, const models::Routing& routing,
                         models::ExpertsImpl& experts) override;

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
};

std::shared_ptr<models::TokenDispatcher> make_token_dispatcher(
    TokenDispatcherType type, std::shared_ptr<comm::ProcessGroup> group);

}  // namespace tessera::parallel
