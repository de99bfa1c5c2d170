#include "tessera/runtime/hf/bert_config.h"

#include <nlohmann/json.hpp>

#include "tessera/core/check.h"
#include "tessera/runtime/hf/hf_config_keys.h"

namespace tessera::runtime::hf {

using nlohmann::json;

namespace {

// transformers' BertConfig defaults (BERT-base, uncased), for keys a file lacks.
constexpr int64_t kBertDefaultVocab = 30522, kBertDefaultHidden = 768, kBertDefaultLayers = 12;
constexpr int64_t kBertDefaultHeads = 12, kBertDefaultIntermediate = 3072, kBertDefaultPositions = 512;
constexpr int64_t kBertDefaultTypes = 2;
constexpr double kBertDefaultEps = 1e-12, kBertDefaultInitRange = 0.02;

void check_bert_architecture(const ConfigKeys& keys) {
  const std::string model_type = keys.text("model_type", "bert");
  TS_CHECK_T(CheckpointError, model_type == "bert", keys.where(), ": model_type \"", model_type,
             "\" is not supported here (this importer reads BERT checkpoints: model_type "
             "\"bert\")");
  keys.require_architectures({"BertForMaskedLM", "BertForPreTraining"},
                             "Tessera's Bert is the encoder with the masked-LM head");
  const std::string act = keys.text("hidden_act", "gelu");
  TS_CHECK_T(CheckpointError, act == "gelu", keys.where(), ": hidden_act \"", act,
             "\" is not supported (Tessera's Bert has the exact erf GELU: hidden_act \"gelu\")");
  const std::string pos = keys.text("position_embedding_type", "absolute");
  TS_CHECK_T(CheckpointError, pos == "absolute", keys.where(), ": position_embedding_type \"", pos,
             "\" is not supported (Tessera's Bert has a learned absolute position table: "
             "\"absolute\")");
  keys.require_flag("is_decoder", false, false, "Tessera's Bert",
                    "it is a bidirectional encoder (causal BERT decoders are not supported)");
  keys.require_flag("add_cross_attention", false, false, "Tessera's Bert",
                    "it has self-attention only");
  keys.require_flag("tie_word_embeddings", true, true, "Tessera's Bert",
                    "its masked-LM decoder is always the word embedding matrix");
}

}  // namespace

models::BertConfig parse_bert_config(const std::string& config_json, const std::string& where) {
  const json j = parse_config_object(config_json, where);
  const ConfigKeys keys(j, where);
  check_bert_architecture(keys);
  models::BertConfig c;
  c.vocab_size = keys.positive_int("vocab_size", kBertDefaultVocab);
  c.hidden_size = keys.positive_int("hidden_size", kBertDefaultHidden);
  c.num_hidden_layers = keys.positive_int("num_hidden_layers", kBertDefaultLayers);
  c.num_attention_heads = keys.positive_int("num_attention_heads", kBertDefaultHeads);
  c.intermediate_size = keys.positive_int("intermediate_size", kBertDefaultIntermediate);
  c.max_position_embeddings = keys.positive_int("max_position_embeddings", kBertDefaultPositions);
  c.type_vocab_size = keys.positive_int("type_vocab_size", kBertDefaultTypes);
  c.layer_norm_eps = keys.number("layer_norm_eps", kBertDefaultEps);
  c.initializer_range = keys.number("initializer_range", kBertDefaultInitRange);
  // pad_token_id only zeroes an embedding row at initialization; 0 is BERT's.
  if (keys.present("pad_token_id")) {
    const json& pad = keys["pad_token_id"];
    TS_CHECK_T(CheckpointError, pad.is_number_integer(), where,
               ": \"pad_token_id\" must be an "
               "integer token id, got ",
               pad.dump());
    c.pad_token_id = pad.get<int64_t>();
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw CheckpointError(c10::str(where, ": ", e.what_without_backtrace()));
  }
  return c;
}

models::BertConfig read_bert_config(const std::string& dir) {
  std::string path;
  const std::string text = read_config_text(dir, path);
  return parse_bert_config(text, path);
}

std::string bert_config_json(const models::BertConfig& c) {
  c.validate();
  nlohmann::ordered_json j;
  j["architectures"] = {"BertForMaskedLM"};
  j["model_type"] = "bert";
  j["hidden_act"] = "gelu";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["type_vocab_size"] = c.type_vocab_size;
  j["layer_norm_eps"] = c.layer_norm_eps;
  j["initializer_range"] = c.initializer_range;
  j["position_embedding_type"] = "absolute";
  // Tessera trains without dropout; a model fine-tuned on in transformers gets
  // none either unless the user sets it.
  j["hidden_dropout_prob"] = 0.0;
  j["attention_probs_dropout_prob"] = 0.0;
  j["pad_token_id"] = c.pad_token_id;
  j["tie_word_embeddings"] = true;
  j["is_decoder"] = false;
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

std::vector<BertTensor> bert_tensors(const models::BertConfig& c) {
  // transformers' names are Tessera's parameter names.
  std::vector<BertTensor> out;
  for (auto& [name, shape] : models::bert_parameter_shapes(c)) out.push_back({name, shape});
  return out;
}

}  // namespace tessera::runtime::hf
