// GptPipelineStage: this rank's share of a GPT under pipeline (and tensor)
// parallelism (decoder_pipeline_stage.h describes the cut, the tied embedding
// and the activations), each chunk split over the tensor-parallel group
// (TensorParallelGPT, tensor/tp_gpt.h). The first virtual stage embeds (wte,
// wpe), the last applies ln_f, the tied head and the vocab-parallel loss.
//
//   auto mesh = ProcessMesh::build(world, /*tp=*/2, /*pp=*/2);
//   GptPipelineStage stage(gpt_config, mesh, {/*virtual_stages=*/1});
//   stage.set_optimizer([&] { opt.step(); });
//   stage.set_batch(ids, targets, m);  exec.run(stage);
//
// Blocks are split as evenly as their count allows (the first chunks take one
// more when n_layer is not a multiple of p * v), or balanced by parameter count.
// Weights equal the dense GPT's of the same config (same seed); no rank builds
// more than its own part. named_parameters() keeps the dense names
// ("h.3.attn.c_attn.weight"), each rank holding its tensor-parallel slice
// (dense_slice_of says which). Dropout draws from the stage's DropoutRng,
// seeded with options.dropout_seed and this rank's mesh coordinates.
//
// ConfigError (before anything is built) when p * v exceeds n_layer or the
// tensor-parallel layout does not fit the model (check_tensor_parallel_layout).
#pragma once

#include <torch/torch.h>

#include <utility>
#include <vector>

#include "tessera/models/gpt.h"
#include "tessera/parallel/pipeline/decoder_pipeline_stage.h"
#include "tessera/parallel/process_mesh.h"
#include "tessera/parallel/tensor/tp_gpt.h"

namespace tessera::parallel {

// The GPT's p * v chunks so that the largest chunk's parameter count — its
// blocks, plus the embedding (wte, wpe) on the first chunk and ln_f and the
// tied head on the last — is as small as possible.
std::vector<std::pair<int64_t, int64_t>> split_layers_by_parameters(const models::GPTConfig& config,
                                                                    int p, int v);

using GptStageOptions = DecoderStageOptions;

class GptPipelineStage : public DecoderPipelineStage {
 public:
  // The stage of `mesh` this rank is on.
  GptPipelineStage(const models::GPTConfig& config, const ProcessMesh& mesh,
                   GptStageOptions options = {});

  TensorParallelGPT& model() { return model_; }

 private:
  TensorParallelGPT model_{nullptr};
};

// The GPT as the model-parallel engine sees it.
DecoderSpec gpt_decoder_spec(const models::GPTConfig& config);

}  // namespace tessera::parallel
