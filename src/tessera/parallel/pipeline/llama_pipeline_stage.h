// LlamaPipelineStage: this rank's share of a Llama (models/llama.h) under
// pipeline and tensor parallelism — the cut, tied embedding and activations of
// decoder_pipeline_stage.h, each chunk split over the tensor-parallel group
// (TensorParallelLlama, tensor/tp_llama.h). The first virtual stage embeds, the
// last applies the final RMSNorm, the LM head (its own weight, or the tied
// embedding) and the vocab-parallel loss.
//
//   auto mesh = ProcessMesh::build(world, /*tp=*/2, /*pp=*/2);
//   LlamaPipelineStage stage(llama_config, mesh, {/*virtual_stages=*/1});
//
// Weights equal the dense Llama's of the same config and seed; parameter names
// are transformers' ("model.layers.3.mlp.up_proj.weight"), each rank holding
// its tensor-parallel slice (llama_dense_slice_of).
//
// ConfigError (before anything is built) when p * v exceeds
// num_hidden_layers or the tensor-parallel layout does not fit the model
// (check_llama_tensor_parallel_layout).
#pragma once

#include <utility>
#include <vector>

#include "tessera/models/llama.h"
#include "tessera/parallel/pipeline/decoder_pipeline_stage.h"
#include "tessera/parallel/tensor/tp_llama.h"

namespace tessera::parallel {

// The Llama's p * v chunks balanced by parameter count: the layers, plus the
// embedding on the first chunk and the final norm and the head on the last.
std::vector<std::pair<int64_t, int64_t>> split_llama_layers_by_parameters(
    const models::LlamaConfig& config, int p, int v);

class LlamaPipelineStage : public DecoderPipelineStage {
 public:
  LlamaPipelineStage(const models::LlamaConfig& config, const ProcessMesh& mesh,
                     DecoderStageOptions options = {});

  TensorParallelLlama& model() { return model_; }

 private:
  TensorParallelLlama model_{nullptr};
};

// The Llama as the model-parallel engine sees it.
DecoderSpec llama_decoder_spec(const models::LlamaConfig& config);

}  // namespace tessera::parallel
