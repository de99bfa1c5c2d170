// GptPipelineStage: this rank's share of a GPT under pipeline (and tensor)
// parallelism. The GPT is cut into p * v chunks of whole blocks; the rank holds
// the chunks of its stage (virtual stages c * p + s, pipeline_schedule.h), each
// split over its tensor-parallel group (TensorParallelGPT, tensor/tp_gpt.h). The
// first virtual stage also embeds (wte, wpe), the last also applies ln_f, the
// tied head and the vocab-parallel loss.
//
//   auto mesh = ProcessMesh::build(world, /*tp=*/2, /*pp=*/2);
//   GptPipelineStage stage(gpt_config, mesh, {/*virtual_stages=*/1});
//   stage.set_optimizer([&] { opt.step(); });
//   stage.set_batch(ids, targets, m);  exec.run(stage);
//
// Blocks are split as evenly as their count allows (the first chunks take one
// more when n_layer is not a multiple of p * v), or balanced by parameter count. The tied token embedding lives
// on the first and the last stage; reduce_gradients() sums its gradient over
// the embedding group so both copies take the same step, as Megatron does, then
// runs the caller's gradient reduction (data parallel) if one is set.
// Activations between stages are [micro, T, C], or [micro, T/tp, C] under
// sequence parallel (each tensor-parallel rank sends its part of the sequence).
//
// Weights equal the dense GPT's of the same config (same seed); no rank builds
// more than its own part. parameters() lists what this stage trains;
// named_parameters() keeps the dense names ("h.3.attn.c_attn.weight"), each
// rank holding its tensor-parallel slice (dense_slice_of says which).
//
// ConfigError (before anything is built) when p * v exceeds n_layer or the
// tensor-parallel layout does not fit the model (check_tensor_parallel_layout).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/models/gpt.h"
#include "tessera/parallel/pipeline/batched_stage.h"
#include "tessera/parallel/process_mesh.h"
#include "tessera/parallel/tensor/tp_gpt.h"

namespace tessera::parallel {

// The blocks [begin, end) of each of p * v chunks (virtual stages), in order,
// as even in count as possible. ConfigError naming the sizes when p * v > n_layer.
std::vector<std::pair<int64_t, int64_t>> split_layers(int64_t n_layer, int p, int v);

// The same cut so that the largest chunk's parameter count — its blocks, plus
// the embedding (wte, wpe) on the first chunk and ln_f and the tied head on the
// last — is as small as possible (DeepSpeed's partition_method "parameters").
// Every chunk keeps at least one block.
std::vector<std::pair<int64_t, int64_t>> split_layers_by_parameters(const models::GPTConfig& config,
                                                                    int p, int v);
// The general form: contiguous chunks of `block_cost`, minimizing the largest
// chunk's cost plus `first_extra` on chunk 0 and `last_extra` on the last.
std::vector<std::pair<int64_t, int64_t>> balanced_split(const std::vector<int64_t>& block_cost,
                                                        int64_t first_extra, int64_t last_extra,
                                                        int chunks);

struct GptStageOptions {
  int virtual_stages = 1;          // v: chunks per stage (interleaved schedules)
  bool sequence_parallel = false;  // see tensor/tp_gpt.h
  uint64_t dropout_seed = 0;       // DropoutRng seed (with the mesh coordinates)
  bool balance_by_parameters = false;  // split_layers_by_parameters, else split_layers
  // With config.activation_checkpoints > 0: keep 1/tp of each checkpointed
  // input (tensor/tp_checkpoint.h).
  bool partition_activations = false;
};

class GptPipelineStage : public BatchedStage {
 public:
  // The stage of `mesh` this rank is on. Dropout (config.dropout > 0) draws
  // from a DropoutRng seeded with options.dropout_seed and this rank's mesh
  // coordinates.
  GptPipelineStage(const models::GPTConfig& config, const ProcessMesh& mesh,
                   GptStageOptions options = {});

  // set_batch takes [m * micro, T] ids and targets. What the stage's optimizer
  // steps on: the model's parameters, named as in the GPT.
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const override;

  torch::Tensor forward(int chunk, int micro, const torch::Tensor& input) override;
  torch::Tensor activation_like(int chunk, int micro) override;
  // Sums the tied embedding's gradient over its two stages, then runs the
  // caller's reduction (e.g. the data-parallel average).
  void reduce_gradients() override;

  TensorParallelGPT& model() { return model_; }
  DropoutRng& dropout_rng() { return *model_->tp().dropout_rng; }
  // True when this rank's copy of `name` is a duplicate that a global sum over
  // every rank (a norm, a parameter count) must skip: the tied embedding on the
  // last stage, and whole (not split) parameters on tensor-parallel ranks > 0.
  bool is_duplicate(const std::string& name) const;

 private:
  bool first_chunk(int chunk) const { return chunk * p_ + stage_ == 0; }
  bool last_chunk(int chunk) const { return chunk * p_ + stage_ == p_ * v_ - 1; }
  bool holds_embedding() const { return stage_ == 0 || stage_ == p_ - 1; }

  models::GPTConfig config_;
  int p_, v_, stage_, tp_rank_, tp_size_;
  bool sequence_parallel_;
  std::shared_ptr<comm::ProcessGroup> embedding_;
  TensorParallelGPT model_{nullptr};
  std::vector<std::pair<int64_t, int64_t>> my_layers_;  // per local chunk
};

}  // namespace tessera::parallel
