#include "tessera/runtime/hf/llama_config.h"

#include <nlohmann/json.hpp>

#include "tessera/core/check.h"
#include "tessera/runtime/hf/hf_config_keys.h"

namespace tessera::runtime::hf {

using nlohmann::json;

namespace {

// transformers' LlamaConfig defaults (Llama 2 7B), for keys a file lacks.
constexpr int64_t kLlamaDefaultVocab = 32000, kLlamaDefaultHidden = 4096, kLlamaDefaultIntermediate = 11008;
constexpr int64_t kLlamaDefaultLayers = 32, kLlamaDefaultHeads = 32, kLlamaDefaultPositions = 2048;
constexpr double kLlamaDefaultEps = 1e-6, kLlamaDefaultTheta = 10000.0, kLlamaDefaultInitRange = 0.02;

void check_llama_architecture(const ConfigKeys& keys) {
  const std::string model_type = keys.text("model_type", "llama");
  TS_CHECK_T(CheckpointError, model_type == "llama", keys.where(), ": model_type \"", model_type,
             "\" is not supported here (this importer reads Llama checkpoints: model_type "
             "\"llama\")");
  keys.require_architectures({"LlamaForCausalLM"},
                             "other classes carry weights or heads Tessera's Llama has no place "
                             "for");
  const std::string act = keys.text("hidden_act", "silu");
  TS_CHECK_T(CheckpointError, act == "silu", keys.where(), ": hidden_act \"", act,
             "\" is not supported (Tessera's Llama has the SwiGLU MLP: hidden_act \"silu\")");
  const double dropout = keys.number("attention_dropout", 0.0);
  TS_CHECK_T(CheckpointError, dropout == 0.0, keys.where(), ": attention_dropout ", dropout,
             " is not supported (Tessera's Llama has no dropout: use 0.0)");
}

// A required number inside rope_scaling.
double rope_number(const json& r, const char* key, const std::string& type,
                   const std::string& where) {
  TS_CHECK_T(CheckpointError, r.contains(key) && r[key].is_number(), where, ": rope_scaling of ",
             "type \"", type, "\" needs a number \"", key, "\", got ",
             r.contains(key) ? r[key].dump() : std::string("nothing"));
  return r[key].get<double>();
}

models::RopeScaling parse_rope_scaling(const ConfigKeys& keys) {
  models::RopeScaling out;
  if (!keys.present("rope_scaling")) return out;
  const json& r = keys["rope_scaling"];
  const std::string& where = keys.where();
  TS_CHECK_T(CheckpointError, r.is_object(), where, ": \"rope_scaling\" must be null or an ",
             "object, got ", r.dump());
  // Older files name the type "type"; transformers reads either.
  const char* type_key = r.contains("rope_type") ? "rope_type" : "type";
  TS_CHECK_T(CheckpointError, r.contains(type_key) && r[type_key].is_string(), where,
             ": rope_scaling has no \"rope_type\" string: ", r.dump());
  const std::string type = r[type_key].get<std::string>();
  if (type == "default") return out;
  if (type == "linear") {
    out.type = models::RopeScaling::Type::kLinear;
    out.factor = rope_number(r, "factor", type, where);
  } else if (type == "llama3") {
    out.type = models::RopeScaling::Type::kLlama3;
    out.factor = rope_number(r, "factor", type, where);
    out.low_freq_factor = rope_number(r, "low_freq_factor", type, where);
    out.high_freq_factor = rope_number(r, "high_freq_factor", type, where);
    const double original = rope_number(r, "original_max_position_embeddings", type, where);
    out.original_max_position_embeddings = static_cast<int64_t>(original);
    TS_CHECK_T(CheckpointError,
               static_cast<double>(out.original_max_position_embeddings) == original, where,
               ": rope_scaling.original_max_position_embeddings must be an integer, got ",
               original);
  } else {
    throw CheckpointError(c10::str(
        where, ": rope_scaling.", type_key, " \"", type,
        "\" is not supported (Tessera's Llama supports \"default\", \"linear\" and \"llama3\")"));
  }
  return out;
}

}  // namespace

models::LlamaConfig parse_llama_config(const std::string& config_json, const std::string& where) {
  const json j = parse_config_object(config_json, where);
  const ConfigKeys keys(j, where);
  check_llama_architecture(keys);
  models::LlamaConfig c;
  c.vocab_size = keys.positive_int("vocab_size", kLlamaDefaultVocab);
  c.hidden_size = keys.positive_int("hidden_size", kLlamaDefaultHidden);
  c.intermediate_size = keys.positive_int("intermediate_size", kLlamaDefaultIntermediate);
  c.num_hidden_layers = keys.positive_int("num_hidden_layers", kLlamaDefaultLayers);
  c.num_attention_heads = keys.positive_int("num_attention_heads", kLlamaDefaultHeads);
  c.num_key_value_heads = keys.positive_int("num_key_value_heads", c.num_attention_heads);
  c.head_dim = keys.positive_int("head_dim", 0);
  c.max_position_embeddings = keys.positive_int("max_position_embeddings", kLlamaDefaultPositions);
  c.rms_norm_eps = keys.number("rms_norm_eps", kLlamaDefaultEps);
  c.rope_theta = keys.number("rope_theta", kLlamaDefaultTheta);
  c.rope_scaling = parse_rope_scaling(keys);
  c.tie_word_embeddings = keys.flag("tie_word_embeddings", false);
  c.attention_bias = keys.flag("attention_bias", false);
  c.mlp_bias = keys.flag("mlp_bias", false);
  c.initializer_range = keys.number("initializer_range", kLlamaDefaultInitRange);
  try {
    c.validate();
  } catch (const Error& e) {
    throw CheckpointError(c10::str(where, ": ", e.what_without_backtrace()));
  }
  return c;
}

models::LlamaConfig read_llama_config(const std::string& dir) {
  std::string path;
  const std::string text = read_config_text(dir, path);
  return parse_llama_config(text, path);
}

std::string llama_config_json(const models::LlamaConfig& c) {
  c.validate();
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["hidden_act"] = "silu";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.effective_head_dim();
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  using Type = models::RopeScaling::Type;
  const auto& r = c.rope_scaling;
  if (r.type == Type::kNone) {
    j["rope_scaling"] = nullptr;
  } else if (r.type == Type::kLinear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", r.factor}};
  } else {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position_embeddings}};
  }
  j["attention_bias"] = c.attention_bias;
  j["attention_dropout"] = 0.0;
  j["mlp_bias"] = c.mlp_bias;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["initializer_range"] = c.initializer_range;
  j["pretraining_tp"] = 1;
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

std::vector<LlamaTensor> llama_tensors(const models::LlamaConfig& c) {
  // transformers' names are Tessera's parameter names.
  std::vector<LlamaTensor> out;
  for (auto& [name, shape] : models::llama_parameter_shapes(c)) out.push_back({name, shape});
  return out;
}

}  // namespace tessera::runtime::hf
