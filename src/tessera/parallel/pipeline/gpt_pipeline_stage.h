// GptPipelineStage: the GPT of models/gpt.h cut into p * v chunks of whole
// blocks for pipeline parallelism, this rank holding the chunks of its stage
// (virtual stages c * p + s, pipeline_schedule.h). The first virtual stage also
// embeds (wte, wpe), the last also applies ln_f, the tied head and the loss.
//
// Blocks are split as evenly as their count allows (the first chunks take one
// more when n_layer is not a multiple of p * v). The tied token embedding lives
// on the first and the last stage; reduce_gradients() sums its gradient over
// the embedding group so both copies take the same step, as Megatron does.
//
// Weights equal the dense GPT's of the same config (every stage builds it with
// the same seed and keeps its own layers). parameters() lists what this stage
// trains; named_parameters() keeps the dense names ("h.3.attn.c_attn.weight").
//
// ConfigError (before anything is built) when p * v exceeds n_layer.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/models/gpt.h"
#include "tessera/parallel/pipeline/pipeline_executor.h"

namespace tessera::parallel {

// The blocks [begin, end) of each of p * v chunks (virtual stages), in order.
// ConfigError naming the sizes when p * v > n_layer.
std::vector<std::pair<int64_t, int64_t>> split_layers(int64_t n_layer, int p, int v);

class GptPipelineStage : public PipelineStage {
 public:
  // `embedding`: the group of the first and last stage (nullptr when p == 1).
  GptPipelineStage(const models::GPTConfig& config, int p, int v, int stage,
                   std::shared_ptr<comm::ProcessGroup> embedding);

  // The step's batch, [m * micro, T] ids and targets, split into m micro-batches.
  void set_batch(const torch::Tensor& ids, const torch::Tensor& targets, int m);
  // What the stage's optimizer steps on, and an optional step callback.
  std::vector<torch::Tensor> parameters() const;
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const;
  void set_optimizer(std::function<void()> step) { step_ = std::move(step); }

  torch::Tensor forward(int chunk, int micro, const torch::Tensor& input) override;
  torch::Tensor activation_like(int chunk, int micro) override;
  void reduce_gradients() override;
  void optimizer_step() override;

  models::GPT& dense() { return dense_; }

 private:
  bool first_chunk(int chunk) const { return chunk * p_ + stage_ == 0; }
  bool last_chunk(int chunk) const { return chunk * p_ + stage_ == p_ * v_ - 1; }
  bool holds_embedding() const { return stage_ == 0 || stage_ == p_ - 1; }

  models::GPTConfig config_;
  int p_, v_, stage_;
  std::shared_ptr<comm::ProcessGroup> embedding_;
  models::GPT dense_;
  std::vector<std::pair<int64_t, int64_t>> my_layers_;  // per local chunk
  std::vector<torch::Tensor> ids_, targets_;
  std::function<void()> step_;
};

}  // namespace tessera::parallel
