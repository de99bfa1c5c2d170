#include "tessera/parallel/pipeline/batched_stage.h"

#include "tessera/core/check.h"

namespace tessera::parallel {

void BatchedStage::set_batch(const torch::Tensor& inputs, const torch::Tensor& targets, int m) {
  TS_CHECK(m > 0 && inputs.size(0) % m == 0 && targets.size(0) == inputs.size(0),
           "pipeline stage: a batch of ", inputs.size(0), " inputs and ", targets.size(0),
           " targets does not split into ", m, " micro-batches");
  inputs_ = inputs.chunk(m, 0);
  targets_ = targets.chunk(m, 0);
}

std::vector<torch::Tensor> BatchedStage::parameters() const {
  std::vector<torch::Tensor> out;
  for (auto& named : named_parameters()) out.push_back(named.second);
  return out;
}

void BatchedStage::reduce_gradients() {
  if (reduce_) reduce_();
}

void BatchedStage::optimizer_step() {
  if (step_) step_();
}

}  // namespace tessera::parallel
