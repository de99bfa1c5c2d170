#include "tessera/parallel/tensor/tp_bert.h"

#include <optional>

#include "tessera/core/check.h"
#include "tessera/parallel/tensor/tp_ops.h"

namespace tessera::parallel {

namespace {

namespace F = torch::nn::functional;

bool bert_suffix(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

torch::nn::LayerNorm bert_layer_norm(int64_t size, double eps) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({size}).eps(eps));
}

// LayerNorm(residual + dense(x)) with dense row-parallel: the partial sums are
// reduced before the residual, so the LayerNorm sees whole activations.
class TpBertResidualOutputImpl : public torch::nn::Module {
 public:
  TpBertResidualOutputImpl(int64_t in, int64_t hidden, double eps, const TensorParallelOptions& tp) {
    dense = register_module("dense", RowParallelLinear(in, hidden, tp, /*bias=*/true));
    layer_norm = register_module("LayerNorm", bert_layer_norm(hidden, eps));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& residual) {
    return layer_norm(dense(x) + residual);
  }
  RowParallelLinear dense{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};
};
TORCH_MODULE(TpBertResidualOutput);

// This rank's heads of bidirectional self-attention.
class TpBertSelfAttentionImpl : public torch::nn::Module {
 public:
  TpBertSelfAttentionImpl(const models::BertConfig& c, const TensorParallelOptions& tp)
      : heads_(c.num_attention_heads / tp.group->size()) {
    const int64_t C = c.hidden_size;
    query = register_module("query", ColumnParallelLinear(C, C, tp, true));
    key = register_module("key", ColumnParallelLinear(C, C, tp, true));
    value = register_module("value", ColumnParallelLinear(C, C, tp, true));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask) {
    return models::bert_attention(query(x), key(x), value(x), heads_, key_mask);
  }
  ColumnParallelLinear query{nullptr}, key{nullptr}, value{nullptr};

 private:
  int64_t heads_;
};
TORCH_MODULE(TpBertSelfAttention);

class TpBertLayerImpl : public torch::nn::Module {
 public:
  TpBertLayerImpl(const models::BertConfig& c, const TensorParallelOptions& tp) {
    // transformers' registration order and names.
    auto attention = register_module("attention", std::make_shared<torch::nn::Module>());
    self_ = attention->register_module("self", TpBertSelfAttention(c, tp));
    attention_output_ = attention->register_module(
        "output", TpBertResidualOutput(c.hidden_size, c.hidden_size, c.layer_norm_eps, tp));
    auto intermediate = register_module("intermediate", std::make_shared<torch::nn::Module>());
    intermediate_ = intermediate->register_module(
        "dense", ColumnParallelLinear(c.hidden_size, c.intermediate_size, tp, true));
    output_ = register_module(
        "output", TpBertResidualOutput(c.intermediate_size, c.hidden_size, c.layer_norm_eps, tp));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask) {
    auto a = attention_output_(self_(x, key_mask), x);
    return output_(F::gelu(intermediate_(a)), a);  // exact erf GELU, as the dense model
  }

 private:
  TpBertSelfAttention self_{nullptr};
  TpBertResidualOutput attention_output_{nullptr}, output_{nullptr};
  ColumnParallelLinear intermediate_{nullptr};
};
TORCH_MODULE(TpBertLayer);

}  // namespace

DenseSlice bert_dense_slice_of(const std::string& name) {
  for (const char* rows : {"attention.self.query.weight", "attention.self.query.bias",
                           "attention.self.key.weight", "attention.self.key.bias",
                           "attention.self.value.weight", "attention.self.value.bias",
                           "intermediate.dense.weight", "intermediate.dense.bias"}) {
    if (bert_suffix(name, rows)) return {DenseSlice::Kind::kRows, 1};
  }
  if (name == "bert.embeddings.word_embeddings.weight" || name == "cls.predictions.bias") {
    return {DenseSlice::Kind::kRows, 1};
  }
  if (bert_suffix(name, "attention.output.dense.weight") ||
      (name.find(".intermediate.") == std::string::npos && bert_suffix(name, "output.dense.weight"))) {
    return {DenseSlice::Kind::kColumns, 1};
  }
  return {};
}

void check_bert_tensor_parallel_layout(const models::BertConfig& c, int n, bool sequence_parallel) {
  c.validate();
  TS_CHECK_T(ConfigError, !sequence_parallel,
             "sequence_parallel is not supported for BERT; remove it (tensor parallelism alone "
             "splits the encoder)");
  auto divides = [n](const char* key, int64_t v, const char* why) {
    TS_CHECK_T(ConfigError, v % n == 0, "model.", key, " ", v,
               " does not divide by tensor_model_parallel_size ", n, ": ", why);
  };
  divides("num_attention_heads", c.num_attention_heads,
          "every tensor-parallel rank needs whole attention heads");
  divides("intermediate_size", c.intermediate_size,
          "the MLP's columns are split evenly across the tensor-parallel ranks");
  divides("vocab_size", c.vocab_size, "pad the vocabulary to a multiple of it");
}

TensorParallelBertImpl::TensorParallelBertImpl(const models::BertConfig& config,
                                               TensorParallelOptions tp, DecoderPart part)
    : config_(config), tp_(std::move(tp)), part_(std::move(part)) {
  tp_.draw_weights = tp_.draw_weights && part_.initialize;  // no placeholder draws either
  TS_CHECK_T(ConfigError, tp_.group != nullptr, "TensorParallelBert needs a tensor-parallel group");
  check_bert_tensor_parallel_layout(config_, tp_.group->size(), tp_.sequence_parallel);
  const int64_t L = config_.num_hidden_layers, C = config_.hidden_size;
  if (part_.blocks.empty()) part_.blocks.emplace_back(0, L);
  for (const auto& [b, e] : part_.blocks) {
    TS_CHECK_T(ConfigError, 0 <= b && b < e && e <= L, "TensorParallelBert: layer range [", b,
               ", ", e, ") is outside the model's ", L, " layers");
  }
  auto bert = register_module("bert", std::make_shared<torch::nn::Module>());
  auto embeddings = bert->register_module("embeddings", std::make_shared<torch::nn::Module>());
  // The last stage keeps the word embedding for the tied decoder.
  if (part_.embedding || part_.head) {
    word_embeddings_ = embeddings->register_module(
        "word_embeddings", VocabParallelEmbedding(config_.vocab_size, C, tp_));
  }
  if (part_.embedding) {
    position_ = embeddings->register_module("position_embeddings", std::make_shared<torch::nn::Module>())
                    ->register_parameter("weight", torch::zeros({config_.max_position_embeddings, C}));
    token_type_ = embeddings->register_module("token_type_embeddings", std::make_shared<torch::nn::Module>())
                      ->register_parameter("weight", torch::zeros({config_.type_vocab_size, C}));
    embeddings_norm_ = embeddings->register_module("LayerNorm", bert_layer_norm(C, config_.layer_norm_eps));
  }
  auto encoder = bert->register_module("encoder", std::make_shared<torch::nn::Module>());
  auto layer = encoder->register_module("layer", std::make_shared<torch::nn::Module>());
  layers_.resize(static_cast<size_t>(L));
  for (const auto& [b, e] : part_.blocks) {
    for (int64_t i = b; i < e; ++i) {
      layers_[static_cast<size_t>(i)] =
          torch::nn::AnyModule(layer->register_module(std::to_string(i), TpBertLayer(config_, tp_)));
    }
  }
  if (part_.head) {
    auto predictions = register_module("cls", std::make_shared<torch::nn::Module>())
                           ->register_module("predictions", std::make_shared<torch::nn::Module>());
    vocab_bias_ = predictions->register_parameter(
        "bias", torch::zeros({config_.vocab_size / tp_.group->size()}));
    auto transform = predictions->register_module("transform", std::make_shared<torch::nn::Module>());
    transform_ = transform->register_module("dense", torch::nn::Linear(C, C));
    transform_norm_ = transform->register_module("LayerNorm", bert_layer_norm(C, config_.layer_norm_eps));
  }

  if (!part_.initialize) return;  // the caller loads every weight
  // The dense BERT's weights, sliced: same seed, same weights as a dense run.
  fill_from_dense(
      *this,
      [this](const DenseTensorVisitor& visit) { models::for_each_initial_parameter(config_, visit); },
      bert_dense_slice_of, tp_.group->rank(), tp_.group->size(), "TensorParallelBert");
}

torch::Tensor TensorParallelBertImpl::embed(const torch::Tensor& ids) {
  TS_CHECK(part_.embedding, "TensorParallelBert.embed: this rank does not hold the embedding");
  TS_CHECK(ids.dim() == 2, "TensorParallelBert expects input_ids of shape [B, T], got ", ids.sizes());
  const int64_t T = ids.size(1);
  TS_CHECK(T >= 1 && T <= config_.max_position_embeddings, "TensorParallelBert: sequence length ",
           T, " is outside [1, max_position_embeddings = ", config_.max_position_embeddings, "]");
  // Token type 0 everywhere, as the dense model.
  return embeddings_norm_(word_embeddings_(ids) + position_.narrow(0, 0, T) + token_type_[0]);
}

torch::Tensor TensorParallelBertImpl::blocks(int64_t begin, int64_t end, torch::Tensor x) {
  torch::Tensor key_mask;
  if (attention_mask_.defined()) {
    key_mask = attention_mask_.ne(0).view({x.size(0), 1, 1, x.size(1)});
  }
  for (int64_t i = begin; i < end; ++i) {
    auto& layer = layers_.at(static_cast<size_t>(i));
    TS_CHECK(!layer.is_empty(), "TensorParallelBert: this rank does not hold layer ", i);
    x = layer.forward(x, key_mask);
  }
  return x;
}

torch::Tensor TensorParallelBertImpl::logits(const torch::Tensor& x) {
  TS_CHECK(part_.head, "TensorParallelBert: this rank does not hold the head");
  // The transform is whole and computed alike on every rank; its output's
  // gradient is partial (this rank's vocabulary) and is summed by copy_to_tp.
  auto h = copy_to_tp(transform_norm_(F::gelu(transform_(x))), *tp_.group);
  return F::linear(h, word_embeddings_->weight, vocab_bias_);
}

torch::Tensor TensorParallelBertImpl::head_loss(const torch::Tensor& x, const torch::Tensor& labels) {
  auto out = logits(x);
  auto flat = labels.reshape({-1});
  auto picked = flat.ne(-100);
  // The same labels on every tp rank, so every rank takes the same branch.
  if (!picked.any().item<bool>()) return out.sum() * 0.0;
  auto rows = out.reshape({-1, out.size(-1)}).index({picked});
  return vocab_parallel_cross_entropy(rows, flat.index({picked}), *tp_.group);
}

torch::Tensor TensorParallelBertImpl::tied_embedding() const {
  return word_embeddings_ ? word_embeddings_->weight : torch::Tensor();
}

torch::Tensor TensorParallelBertImpl::forward(const torch::Tensor& input_ids,
                                              const torch::Tensor& attention_mask) {
  TS_CHECK(!attention_mask.defined() || attention_mask.sizes() == input_ids.sizes(),
           "TensorParallelBert: attention_mask has shape ", attention_mask.sizes(),
           " but input_ids has ", input_ids.sizes());
  attention_mask_ = attention_mask;
  auto out = logits(blocks(0, config_.num_hidden_layers, embed(input_ids)));
  attention_mask_ = torch::Tensor();
  return out;
}

}  // namespace tessera::parallel
