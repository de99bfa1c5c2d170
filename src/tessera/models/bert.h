// Bert: the BERT encoder with its masked-language-model head, computing what
// Hugging Face's BertForMaskedLM computes in eval mode, with its parameter names.
//
// Embeddings: word + absolute position + token type (type 0 for every token:
// single-segment input), then LayerNorm. num_hidden_layers post-LN encoder
// layers: x = LayerNorm(x + attention(x)), where attention is bidirectional
// multi-head self-attention that ignores padded keys (attention_mask), then
// x = LayerNorm(x + dense(gelu(dense(x)))). The MLM head transforms each hidden
// state by LayerNorm(gelu(dense(h))) and projects it onto the vocabulary with the
// word embedding matrix (tied, always) plus a bias of its own.
//
// Parameters are named as in transformers, so a checkpoint maps one to one:
// bert.embeddings.{word,position,token_type}_embeddings.weight,
// bert.embeddings.LayerNorm.{weight,bias},
// bert.encoder.layer.N.attention.self.{query,key,value}.{weight,bias},
// bert.encoder.layer.N.attention.output.{dense,LayerNorm}.{weight,bias},
// bert.encoder.layer.N.intermediate.dense.{weight,bias},
// bert.encoder.layer.N.output.{dense,LayerNorm}.{weight,bias},
// cls.predictions.transform.{dense,LayerNorm}.{weight,bias}, cls.predictions.bias.
// There is no dropout: training runs without it, and the forward equals
// transformers' eval-mode forward. The GELU is the exact (erf) one, hidden_act
// "gelu".
//
// Initialization follows transformers: Linear and embedding weights
// ~ N(0, initializer_range), the pad_token_id row of the word embedding zero,
// biases zero, LayerNorm weights one, drawn in registration order from a private
// generator seeded with config.seed (identical on every rank, global RNG untouched).
//
// Ownership and threads: an ordinary torch::nn module (use through the Bert
// holder). Not thread-safe; one training thread per instance. float32; any device.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::models {

struct BertConfig {
  int64_t vocab_size = 256;
  int64_t hidden_size = 64;
  int64_t num_hidden_layers = 2;
  int64_t num_attention_heads = 4;
  int64_t intermediate_size = 256;
  int64_t max_position_embeddings = 128;  // longest sequence forward() accepts
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  double initializer_range = 0.02;
  int64_t pad_token_id = 0;  // its embedding row starts at zero
  uint64_t seed = 1337;      // weight initialization seed

  // ConfigError naming the field when a value is out of range.
  void validate() const;
};

// The attention core between the projections: q, k, v [B, T, heads * head_dim]
// -> bidirectional attention over every position -> [B, T, heads * head_dim].
// key_mask (optional, boolean, broadcastable to [B, heads, T, T]) is false at
// padded keys, which get no weight. Shared by the dense and tensor-parallel BERT
// (a tp rank passes its local head count).
torch::Tensor bert_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             int64_t heads, const torch::Tensor& key_mask);

// Multi-head self-attention over all positions, padded keys masked out.
class BertSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit BertSelfAttentionImpl(const BertConfig& config);
  // x: [B, T, C]; key_mask: bool [B, 1, 1, T] (true: attend) or undefined.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask);

  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr};

 private:
  int64_t heads_;
};
TORCH_MODULE(BertSelfAttention);

// LayerNorm(residual + dense(x)): transformers' BertSelfOutput and BertOutput.
class BertResidualOutputImpl : public torch::nn::Module {
 public:
  BertResidualOutputImpl(int64_t in, int64_t hidden, double eps);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& residual);

  torch::nn::Linear dense{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};  // registered as "LayerNorm"
};
TORCH_MODULE(BertResidualOutput);

class BertAttentionImpl : public torch::nn::Module {
 public:
  explicit BertAttentionImpl(const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask);

  BertSelfAttention self{nullptr};
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(BertAttention);

// gelu(dense(x)): transformers' BertIntermediate.
class BertIntermediateImpl : public torch::nn::Module {
 public:
  explicit BertIntermediateImpl(const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear dense{nullptr};
};
TORCH_MODULE(BertIntermediate);

class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask);

  BertAttention attention{nullptr};
  BertIntermediate intermediate{nullptr};
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(BertLayer);

class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& input_ids);  // [B, T] -> [B, T, C]

  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr},
      token_type_embeddings{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};  // registered as "LayerNorm"
};
TORCH_MODULE(BertEmbeddings);

// The "bert." part (transformers' BertModel without its pooler).
class BertModelImpl : public torch::nn::Module {
 public:
  explicit BertModelImpl(const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);

  BertEmbeddings embeddings{nullptr};
  torch::nn::ModuleList layer{nullptr};  // BertLayers in order, registered as encoder.layer
};
TORCH_MODULE(BertModel);

// The "cls.predictions." part: LayerNorm(gelu(dense(h))) and the vocabulary bias.
class BertLMPredictionHeadImpl : public torch::nn::Module {
 public:
  explicit BertLMPredictionHeadImpl(const BertConfig& config);
  // h: [B, T, C]; decoder_weight: the word embedding [V, C]. Returns [B, T, V].
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& decoder_weight);

  torch::Tensor bias;
  torch::nn::Linear dense{nullptr};          // registered as transform.dense
  torch::nn::LayerNorm layer_norm{nullptr};  // registered as transform.LayerNorm
};
TORCH_MODULE(BertLMPredictionHead);

class BertImpl : public torch::nn::Module {
 public:
  // Builds and initializes the model; ConfigError if the config is invalid.
  explicit BertImpl(const BertConfig& config);

  // input_ids: int64 [B, T] with 1 <= T <= max_position_embeddings;
  // attention_mask: [B, T], nonzero for real tokens, 0 for padding (undefined:
  // no padding). tessera::Error on other shapes. Returns float32 logits [B, T, V].
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});

  // Mean cross entropy over the positions whose label is not -100 (int64
  // [B, T]): the masked-LM loss. 0 (with a gradient path) when no label is set.
  torch::Tensor loss(const torch::Tensor& input_ids, const torch::Tensor& labels,
                     const torch::Tensor& attention_mask = {});

  int64_t num_parameters() const;  // the tied decoder counted once
  const BertConfig& config() const { return config_; }

  BertModel bert{nullptr};
  BertLMPredictionHead predictions{nullptr};  // registered as cls.predictions

 private:
  void init_weights();
  BertConfig config_;
};
TORCH_MODULE(Bert);

// Every parameter of Bert(config) with its shape, in registration order
// (transformers' state_dict order).
std::vector<std::pair<std::string, std::vector<int64_t>>> bert_parameter_shapes(
    const BertConfig& config);

// The Bert's initial parameters for `config`, one dense tensor at a time:
// bit-identical to what Bert(config) holds after construction (it draws
// through this very function), so tensor- and pipeline-parallel ranks keep
// their slices without ever holding the whole model. `visit` may keep the
// tensor. ConfigError if the config is invalid.
using BertParameterVisitor =
    std::function<void(const std::string& name, const torch::Tensor& value)>;
void for_each_initial_parameter(const BertConfig& config, const BertParameterVisitor& visit);

}  // namespace tessera::models
