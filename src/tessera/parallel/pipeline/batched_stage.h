// BatchedStage: what the pipeline stages that train on a batch share (the GPT's
// and the generic layer stage): the step's batch split into micro-batches, and
// the caller's gradient reduction and optimizer step, which the executor runs
// as kReduceGrads and kOptimizerStep.
//
//   stage.set_optimizer([&] { opt.step(); });
//   stage.set_batch(inputs, targets, /*m=*/4);   // then PipelineExecutor::step
//
// A derived stage reads micro-batch i through micro_input(i) / micro_target(i)
// and names its parameters. Not thread-safe: one training thread per stage.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/parallel/pipeline/pipeline_executor.h"

namespace tessera::parallel {

class BatchedStage : public PipelineStage {
 public:
  // inputs and targets (same first dimension, divisible by m) split into m
  // micro-batches along dimension 0; tessera::Error naming the sizes otherwise.
  void set_batch(const torch::Tensor& inputs, const torch::Tensor& targets, int m);
  // reduce_gradients() and optimizer_step() call these (nothing when unset).
  void set_gradient_reduction(std::function<void()> reduce) { reduce_ = std::move(reduce); }
  void set_optimizer(std::function<void()> step) { step_ = std::move(step); }

  // This rank's parameters with their names, and the same without names.
  virtual std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const = 0;
  std::vector<torch::Tensor> parameters() const;

  void reduce_gradients() override;
  void optimizer_step() override;

 protected:
  const torch::Tensor& micro_input(int micro) const { return inputs_.at(static_cast<size_t>(micro)); }
  const torch::Tensor& micro_target(int micro) const { return targets_.at(static_cast<size_t>(micro)); }
  int micro_batches() const { return static_cast<int>(inputs_.size()); }

 private:
  std::vector<torch::Tensor> inputs_, targets_;
  std::function<void()> reduce_, step_;
};

}  // namespace tessera::parallel
