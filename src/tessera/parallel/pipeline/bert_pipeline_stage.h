// BertPipelineStage: this rank's share of a BERT (models/bert.h) under pipeline
// and tensor parallelism — the cut, tied word embedding and activations of
// decoder_pipeline_stage.h, each chunk split over the tensor-parallel group
// (TensorParallelBert, tensor/tp_bert.h). The first virtual stage embeds, the
// last applies the masked-LM head and the loss over the labelled positions
// (targets are masked-LM labels, -100 where a position is not predicted).
// Sequences carry no padding (every position attends to every other).
//
//   auto mesh = ProcessMesh::build(world, /*tp=*/2, /*pp=*/2);
//   BertPipelineStage stage(bert_config, mesh);
//
// ConfigError (before anything is built) when p * v exceeds
// num_hidden_layers or the tensor-parallel layout does not fit the model
// (check_bert_tensor_parallel_layout).
#pragma once

#include <utility>
#include <vector>

#include "tessera/models/bert.h"
#include "tessera/parallel/pipeline/decoder_pipeline_stage.h"
#include "tessera/parallel/tensor/tp_bert.h"

namespace tessera::parallel {

class BertPipelineStage : public DecoderPipelineStage {
 public:
  BertPipelineStage(const models::BertConfig& config, const ProcessMesh& mesh,
                    DecoderStageOptions options = {});

  TensorParallelBert& model() { return model_; }

 private:
  TensorParallelBert model_{nullptr};
};

// The BERT as the model-parallel engine sees it.
DecoderSpec bert_decoder_spec(const models::BertConfig& config);

}  // namespace tessera::parallel
