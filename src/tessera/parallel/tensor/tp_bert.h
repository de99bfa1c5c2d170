// TensorParallelBert: the BERT of models/bert.h (encoder and masked-LM head)
// split over a tensor-parallel group the Megatron way, computing what the dense
// model computes.
//
// Attention heads are split across the tp ranks (query, key and value column-
// parallel, attention.output.dense row-parallel), so are the MLP's columns
// (intermediate.dense column-, output.dense row-parallel); the word embedding,
// tied to the masked-LM decoder, and the decoder's vocabulary bias are split by
// vocabulary, and the loss is the vocab-parallel cross entropy over the labelled
// positions (label -100: not counted), so no rank builds the full
// [B, T, vocab] logits. Position and token-type embeddings, LayerNorms and the
// head's transform are whole on every rank. No sequence parallelism.
//
// A pipeline stage (DecoderPipelineStage) runs embed / blocks / head_loss on the
// DecoderPart it holds; the last stage holds a copy of the word embedding for
// the tied decoder. Blocks attend to every position unless set_attention_mask
// gave a padding mask for the batch in flight.
//
// Weights equal the dense BERT's of the same config (models::
// for_each_initial_parameter, one dense tensor at a time); names are
// transformers' ("bert.encoder.layer.0.attention.self.query.weight").
//
// ConfigError (before any weight is built) when num_attention_heads,
// intermediate_size or vocab_size do not divide by tp, or sequence parallelism
// is asked for. float32; no dropout.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "tessera/models/bert.h"
#include "tessera/parallel/tensor/parallel_layers.h"
#include "tessera/parallel/tensor/tp_decoder.h"

namespace tessera::parallel {

// How a parameter of the tensor-parallel BERT relates to the dense one.
DenseSlice bert_dense_slice_of(const std::string& parameter_name);

// The checks TensorParallelBert makes of a layout, without building anything.
void check_bert_tensor_parallel_layout(const models::BertConfig& config, int tp,
                                       bool sequence_parallel);

class TensorParallelBertImpl : public torch::nn::Module, public TpDecoder {
 public:
  TensorParallelBertImpl(const models::BertConfig& config, TensorParallelOptions tp,
                         DecoderPart part = {});

  // input_ids int64 [B, T], attention_mask [B, T] (nonzero: token; undefined: no
  // padding) -> this rank's logits [B, T, vocab/tp].
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});

  // The padding mask [B, T] of the batch blocks() runs on next (undefined: none).
  void set_attention_mask(const torch::Tensor& attention_mask) { attention_mask_ = attention_mask; }

  torch::Tensor embed(const torch::Tensor& idx) override;
  torch::Tensor blocks(int64_t begin, int64_t end, torch::Tensor x) override;
  torch::Tensor logits(const torch::Tensor& x) override;
  // Mean cross entropy over the positions whose label is not -100 (0, with a
  // gradient path, when none is).
  torch::Tensor head_loss(const torch::Tensor& x, const torch::Tensor& labels) override;
  torch::Tensor tied_embedding() const override;
  std::string tied_embedding_name() const override {
    return "bert.embeddings.word_embeddings.weight";
  }
  DenseSlice slice_of(const std::string& name) const override { return bert_dense_slice_of(name); }
  torch::nn::Module& module() override { return *this; }

  const models::BertConfig& config() const { return config_; }

 private:
  models::BertConfig config_;
  TensorParallelOptions tp_;
  DecoderPart part_;
  torch::Tensor attention_mask_;
  VocabParallelEmbedding word_embeddings_{nullptr};
  torch::Tensor position_, token_type_;  // whole tables (first stage)
  torch::nn::LayerNorm embeddings_norm_{nullptr};
  std::vector<torch::nn::AnyModule> layers_;  // by dense index; empty where not held
  torch::nn::Linear transform_{nullptr};      // cls.predictions.transform.dense (last stage)
  torch::nn::LayerNorm transform_norm_{nullptr};
  torch::Tensor vocab_bias_;                  // cls.predictions.bias, this rank's vocabulary
};
TORCH_MODULE(TensorParallelBert);

}  // namespace tessera::parallel
