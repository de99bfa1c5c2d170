#include "tessera/models/bert.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <optional>

#include "tessera/core/check.h"
#include "tessera/models/module_scope.h"

namespace tessera::models {

namespace F = torch::nn::functional;

void BertConfig::validate() const {
  auto positive = [](const char* field, int64_t v) {
    TS_CHECK_T(ConfigError, v > 0, "BertConfig.", field, " must be > 0, got ", v);
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("intermediate_size", intermediate_size);
  positive("max_position_embeddings", max_position_embeddings);
  positive("type_vocab_size", type_vocab_size);
  TS_CHECK_T(ConfigError, hidden_size % num_attention_heads == 0, "BertConfig.hidden_size (",
             hidden_size, ") must be a multiple of num_attention_heads (", num_attention_heads,
             ")");
  TS_CHECK_T(ConfigError, layer_norm_eps > 0 && std::isfinite(layer_norm_eps),
             "BertConfig.layer_norm_eps must be a positive number, got ", layer_norm_eps);
  TS_CHECK_T(ConfigError, initializer_range >= 0 && std::isfinite(initializer_range),
             "BertConfig.initializer_range must be >= 0, got ", initializer_range);
  TS_CHECK_T(ConfigError, pad_token_id >= 0 && pad_token_id < vocab_size,
             "BertConfig.pad_token_id must be a token id in [0, vocab_size = ", vocab_size,
             "), got ", pad_token_id);
}

namespace {

torch::nn::LayerNorm make_layer_norm(int64_t size, double eps) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({size}).eps(eps).elementwise_affine(true));
}

// A parameterless module that only names its children ("encoder", "cls",
// "transform"), so that the parameter names are transformers'.
std::shared_ptr<torch::nn::Module> holder() { return std::make_shared<torch::nn::Module>(); }

}  // namespace

BertSelfAttentionImpl::BertSelfAttentionImpl(const BertConfig& c) : heads_(c.num_attention_heads) {
  const int64_t C = c.hidden_size;
  query = register_module("query", torch::nn::Linear(C, C));
  key = register_module("key", torch::nn::Linear(C, C));
  value = register_module("value", torch::nn::Linear(C, C));
}

torch::Tensor BertSelfAttentionImpl::forward(const torch::Tensor& x,
                                             const torch::Tensor& key_mask) {
  ModuleScope scope(this);
  return bert_attention(query(x), key(x), value(x), heads_, key_mask);
}

torch::Tensor bert_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             int64_t heads, const torch::Tensor& key_mask) {
  const int64_t B = q.size(0), T = q.size(1), C = q.size(2), hd = C / heads;
  auto split_heads = [&](const torch::Tensor& t) {
    return t.view({B, T, heads, hd}).transpose(1, 2);
  };
  // A boolean mask: padded keys get no weight, exactly as transformers' additive
  // large-negative mask gives them a weight that underflows to zero.
  std::optional<at::Tensor> mask;
  if (key_mask.defined()) mask = key_mask;
  auto y = at::scaled_dot_product_attention(split_heads(q), split_heads(k), split_heads(v), mask,
                                            /*dropout_p=*/0.0, /*is_causal=*/false);
  return y.transpose(1, 2).reshape({B, T, C});
}

BertResidualOutputImpl::BertResidualOutputImpl(int64_t in, int64_t hidden, double eps) {
  dense = register_module("dense", torch::nn::Linear(in, hidden));
  layer_norm = register_module("LayerNorm", make_layer_norm(hidden, eps));
}

torch::Tensor BertResidualOutputImpl::forward(const torch::Tensor& x,
                                              const torch::Tensor& residual) {
  ModuleScope scope(this);
  return layer_norm(dense(x) + residual);
}

BertAttentionImpl::BertAttentionImpl(const BertConfig& c) {
  self = register_module("self", BertSelfAttention(c));
  output =
      register_module("output", BertResidualOutput(c.hidden_size, c.hidden_size, c.layer_norm_eps));
}

torch::Tensor BertAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& key_mask) {
  ModuleScope scope(this);
  return output(self(x, key_mask), x);
}

BertIntermediateImpl::BertIntermediateImpl(const BertConfig& c) {
  dense = register_module("dense", torch::nn::Linear(c.hidden_size, c.intermediate_size));
}

torch::Tensor BertIntermediateImpl::forward(const torch::Tensor& x) {
  ModuleScope scope(this);
  return F::gelu(dense(x));  // exact erf GELU: hidden_act "gelu"
}

BertLayerImpl::BertLayerImpl(const BertConfig& c) {
  // transformers' registration order, which is also its state_dict order.
  attention = register_module("attention", BertAttention(c));
  intermediate = register_module("intermediate", BertIntermediate(c));
  output = register_module(
      "output", BertResidualOutput(c.intermediate_size, c.hidden_size, c.layer_norm_eps));
}

torch::Tensor BertLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& key_mask) {
  ModuleScope scope(this);
  auto a = attention(x, key_mask);
  return output(intermediate(a), a);
}

BertEmbeddingsImpl::BertEmbeddingsImpl(const BertConfig& c) {
  word_embeddings =
      register_module("word_embeddings", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  position_embeddings = register_module(
      "position_embeddings", torch::nn::Embedding(c.max_position_embeddings, c.hidden_size));
  token_type_embeddings = register_module("token_type_embeddings",
                                          torch::nn::Embedding(c.type_vocab_size, c.hidden_size));
  layer_norm = register_module("LayerNorm", make_layer_norm(c.hidden_size, c.layer_norm_eps));
}

torch::Tensor BertEmbeddingsImpl::forward(const torch::Tensor& input_ids) {
  ModuleScope scope(this);
  const int64_t T = input_ids.size(1);
  // Token type 0 everywhere: its row is added to every position.
  auto h = word_embeddings(input_ids) + position_embeddings->weight.narrow(0, 0, T) +
           token_type_embeddings->weight[0];
  return layer_norm(h);
}

BertModelImpl::BertModelImpl(const BertConfig& c) {
  embeddings = register_module("embeddings", BertEmbeddings(c));
  auto encoder = register_module("encoder", holder());
  layer = encoder->register_module("layer", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer->push_back(BertLayer(c));
}

torch::Tensor BertModelImpl::forward(const torch::Tensor& input_ids,
                                     const torch::Tensor& attention_mask) {
  ModuleScope scope(this);
  torch::Tensor key_mask;
  if (attention_mask.defined()) {
    key_mask = attention_mask.ne(0).view({input_ids.size(0), 1, 1, input_ids.size(1)});
  }
  auto h = embeddings(input_ids);
  for (const auto& m : *layer) h = m->as<BertLayer>()->forward(h, key_mask);
  return h;
}

BertLMPredictionHeadImpl::BertLMPredictionHeadImpl(const BertConfig& c) {
  auto transform = register_module("transform", holder());
  dense = transform->register_module("dense", torch::nn::Linear(c.hidden_size, c.hidden_size));
  layer_norm =
      transform->register_module("LayerNorm", make_layer_norm(c.hidden_size, c.layer_norm_eps));
  bias = register_parameter("bias", torch::zeros({c.vocab_size}));
}

torch::Tensor BertLMPredictionHeadImpl::forward(const torch::Tensor& h,
                                                const torch::Tensor& decoder_weight) {
  ModuleScope scope(this);
  return F::linear(layer_norm(F::gelu(dense(h))), decoder_weight, bias);
}

BertImpl::BertImpl(const BertConfig& config) : config_(config) {
  config_.validate();
  bert = register_module("bert", BertModel(config_));
  auto cls = register_module("cls", holder());
  predictions = cls->register_module("predictions", BertLMPredictionHead(config_));
  init_weights();
}

std::vector<std::pair<std::string, std::vector<int64_t>>> bert_parameter_shapes(
    const BertConfig& c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    out.emplace_back(name, std::move(shape));
  };
  auto linear = [&](const std::string& name, int64_t in, int64_t outs) {
    add(name + ".weight", {outs, in});
    add(name + ".bias", {outs});
  };
  auto layer_norm = [&](const std::string& name) {
    add(name + ".weight", {C});
    add(name + ".bias", {C});
  };
  add("bert.embeddings.word_embeddings.weight", {c.vocab_size, C});
  add("bert.embeddings.position_embeddings.weight", {c.max_position_embeddings, C});
  add("bert.embeddings.token_type_embeddings.weight", {c.type_vocab_size, C});
  layer_norm("bert.embeddings.LayerNorm");
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string l = "bert.encoder.layer." + std::to_string(i) + ".";
    linear(l + "attention.self.query", C, C);
    linear(l + "attention.self.key", C, C);
    linear(l + "attention.self.value", C, C);
    linear(l + "attention.output.dense", C, C);
    layer_norm(l + "attention.output.LayerNorm");
    linear(l + "intermediate.dense", C, I);
    linear(l + "output.dense", I, C);
    layer_norm(l + "output.LayerNorm");
  }
  // A module's own parameters come before its children's: the vocabulary bias
  // before the transform.
  add("cls.predictions.bias", {c.vocab_size});
  linear("cls.predictions.transform.dense", C, C);
  layer_norm("cls.predictions.transform.LayerNorm");
  return out;
}

void for_each_initial_parameter(const BertConfig& c, const BertParameterVisitor& visit) {
  c.validate();
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(c.seed);
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  // Registration order, so the draws are reproducible: LayerNorms one and zero,
  // biases zero, the rest N(0, initializer_range) with the padding row zeroed.
  for (const auto& [name, shape] : bert_parameter_shapes(c)) {
    if (name.find("LayerNorm.") != std::string::npos) {
      visit(name, ends_with(name, ".weight") ? torch::ones(shape) : torch::zeros(shape));
    } else if (ends_with(name, "bias")) {
      visit(name, torch::zeros(shape));
    } else {
      auto t = torch::empty(shape).normal_(0.0, c.initializer_range, gen);
      if (name == "bert.embeddings.word_embeddings.weight") t[c.pad_token_id].zero_();
      visit(name, t);
    }
  }
}

void BertImpl::init_weights() {
  torch::NoGradGuard no_grad;
  auto params = named_parameters(/*recurse=*/true);
  size_t filled = 0;
  for_each_initial_parameter(config_, [&](const std::string& name, const torch::Tensor& value) {
    torch::Tensor* p = params.find(name);
    TS_INTERNAL_ASSERT(p != nullptr && p->sizes() == value.sizes(), "Bert initializer: ", name);
    p->copy_(value);
    ++filled;
  });
  TS_INTERNAL_ASSERT(filled == params.size(), "Bert initializer covers ", filled, " of ",
                     params.size(), " parameters");
}

torch::Tensor BertImpl::forward(const torch::Tensor& input_ids,
                                const torch::Tensor& attention_mask) {
  ModuleScope scope(this);
  TS_CHECK(input_ids.dim() == 2, "Bert.forward expects input_ids of shape [B, T], got ",
           input_ids.sizes());
  const int64_t T = input_ids.size(1);
  TS_CHECK(T >= 1 && T <= config_.max_position_embeddings, "Bert.forward: sequence length ", T,
           " is outside [1, max_position_embeddings = ", config_.max_position_embeddings,
           "] (crop the input or raise max_position_embeddings)");
  TS_CHECK(!attention_mask.defined() || attention_mask.sizes() == input_ids.sizes(),
           "Bert.forward: attention_mask has shape ", attention_mask.sizes(), " but input_ids has ",
           input_ids.sizes());
  auto h = bert(input_ids, attention_mask);
  return predictions(h, bert->embeddings->word_embeddings->weight);
}

torch::Tensor BertImpl::loss(const torch::Tensor& input_ids, const torch::Tensor& labels,
                             const torch::Tensor& attention_mask) {
  auto logits = forward(input_ids, attention_mask);
  auto flat = labels.reshape({-1});
  auto picked = flat.ne(-100);
  // cross_entropy's mean over zero targets is NaN; a batch without masks adds nothing.
  if (!picked.any().item<bool>()) return logits.sum() * 0.0;
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), flat,
                          F::CrossEntropyFuncOptions().ignore_index(-100));
}

int64_t BertImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace tessera::models
