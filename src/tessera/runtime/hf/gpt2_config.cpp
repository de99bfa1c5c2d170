#include "tessera/runtime/hf/gpt2_config.h"

#include <map>
#include <nlohmann/json.hpp>

#include "tessera/core/check.h"
#include "tessera/runtime/hf/hf_checkpoint.h"
#include "tessera/runtime/hf/hf_config_keys.h"

namespace tessera::runtime::hf {

using nlohmann::json;

namespace {

// GPT2Config's defaults, which transformers uses for keys a file lacks.
constexpr int64_t kDefaultVocab = 50257, kDefaultPositions = 1024, kDefaultEmbd = 768;
constexpr int64_t kDefaultLayers = 12, kDefaultHeads = 12;
constexpr double kDefaultDropout = 0.1, kDefaultEps = 1e-5;
constexpr const char* kModel = "Tessera's GPT";

// Activation names of transformers' ACT2FN that are GELU, and whether each is
// the tanh approximation (the others are the exact erf form).
const std::map<std::string, bool>& gelu_activations() {
  static const std::map<std::string, bool> names = {
      {"gelu_new", true}, {"gelu_pytorch_tanh", true}, {"gelu_fast", true}, {"gelu_accurate", true},
      {"gelu", false},    {"gelu_python", false}};
  return names;
}

void check_architecture(const ConfigKeys& keys, const std::string& where) {
  const std::string model_type = keys.text("model_type", "gpt2");
  TS_CHECK_T(CheckpointError, model_type == "gpt2", where, ": model_type \"", model_type,
             "\" is not supported here (this importer reads GPT-2 checkpoints: model_type "
             "\"gpt2\")");
  keys.require_architectures({"GPT2LMHeadModel", "GPT2Model"},
                             "other heads carry weights Tessera's GPT has no place for");
}

// GPTConfig.gelu_tanh for activation_function.
bool parse_activation(const ConfigKeys& keys, const std::string& where) {
  const std::string act = keys.text("activation_function", "gelu_new");
  auto it = gelu_activations().find(act);
  TS_CHECK_T(CheckpointError, it != gelu_activations().end(), where, ": activation_function \"",
             act,
             "\" is not supported (Tessera's GPT has GELU: gelu_new, gelu_pytorch_tanh, "
             "gelu_fast, gelu_accurate (tanh form) or gelu, gelu_python (exact form))");
  return it->second;
}

double parse_dropout(const ConfigKeys& keys, const std::string& where,
                     const Gpt2ImportOptions& options) {
  if (options.dropout) return *options.dropout;
  const double resid = keys.number("resid_pdrop", kDefaultDropout);
  const double embd = keys.number("embd_pdrop", kDefaultDropout);
  const double attn = keys.number("attn_pdrop", kDefaultDropout);
  TS_CHECK_T(CheckpointError, resid == embd && embd == attn, where,
             ": resid_pdrop, embd_pdrop and attn_pdrop differ (", resid, ", ", embd, ", ", attn,
             "); Tessera's GPT has one dropout rate: set Gpt2ImportOptions.dropout");
  return resid;
}

}  // namespace

Gpt2HfConfig parse_gpt2_config(const std::string& config_json, const std::string& where,
                               const Gpt2ImportOptions& options) {
  const json j = parse_config_object(config_json, where);
  const ConfigKeys keys(j, where);
  check_architecture(keys, where);

  Gpt2HfConfig out;
  models::GPTConfig& c = out.model;
  c.vocab_size = keys.positive_int("vocab_size", kDefaultVocab);
  c.block_size = keys.positive_int("n_positions", kDefaultPositions);
  c.n_layer = keys.positive_int("n_layer", kDefaultLayers);
  c.n_head = keys.positive_int("n_head", kDefaultHeads);
  c.n_embd = keys.positive_int("n_embd", kDefaultEmbd);
  c.bias = true;  // GPT-2's Conv1D and LayerNorm always have biases
  c.gelu_tanh = parse_activation(keys, where);
  c.layer_norm_eps = keys.number("layer_norm_epsilon", kDefaultEps);
  c.dropout = parse_dropout(keys, where, options);
  c.fused_attention = options.fused_attention;
  if (keys.present("n_inner")) {
    const int64_t n_inner = keys.positive_int("n_inner", 4 * c.n_embd);
    TS_CHECK_T(CheckpointError, n_inner == 4 * c.n_embd, where, ": n_inner ", n_inner,
               " is not supported (Tessera's GPT has an MLP of 4 * n_embd = ", 4 * c.n_embd,
               "; use null or that value)");
  }
  keys.require_flag("scale_attn_weights", true, true, kModel,
                    "scores are scaled by 1/sqrt(head dim)");
  keys.require_flag("scale_attn_by_inverse_layer_idx", false, false, kModel,
                    "no per-layer scaling of the scores");
  keys.require_flag("add_cross_attention", false, false, kModel,
                    "a decoder without cross-attention");
  out.tie_word_embeddings = keys.flag("tie_word_embeddings", true);
  try {
    c.validate();
  } catch (const Error& e) {
    throw CheckpointError(c10::str(where, ": ", e.what_without_backtrace()));
  }
  return out;
}

Gpt2HfConfig read_gpt2_config(const std::string& dir, const Gpt2ImportOptions& options) {
  std::string path;
  const std::string text = read_config_text(dir, path);
  return parse_gpt2_config(text, path, options);
}

std::string gpt2_config_json(const models::GPTConfig& config) {
  config.validate();
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["activation_function"] = config.gelu_tanh ? "gelu_new" : "gelu";
  j["vocab_size"] = config.vocab_size;
  j["n_positions"] = config.block_size;
  j["n_embd"] = config.n_embd;
  j["n_layer"] = config.n_layer;
  j["n_head"] = config.n_head;
  j["n_inner"] = nullptr;
  j["layer_norm_epsilon"] = config.layer_norm_eps;
  j["resid_pdrop"] = config.dropout;
  j["embd_pdrop"] = config.dropout;
  j["attn_pdrop"] = config.dropout;
  j["initializer_range"] = 0.02;
  j["scale_attn_weights"] = true;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["reorder_and_upcast_attn"] = false;
  j["tie_word_embeddings"] = true;
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

std::vector<Gpt2Tensor> gpt2_tensors(const models::GPTConfig& config) {
  const int64_t C = config.n_embd;
  std::vector<Gpt2Tensor> out;
  out.push_back({"wte.weight", {config.vocab_size, C}, false, false});
  out.push_back({"wpe.weight", {config.block_size, C}, false, false});
  auto linear = [&](const std::string& prefix, int64_t in, int64_t outs) {
    out.push_back({prefix + ".weight", {in, outs}, true, false});
    out.push_back({prefix + ".bias", {outs}, false, true});
  };
  auto norm = [&](const std::string& prefix) {
    out.push_back({prefix + ".weight", {C}, false, false});
    out.push_back({prefix + ".bias", {C}, false, false});
  };
  for (int64_t i = 0; i < config.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    norm(h + "ln_1");
    linear(h + "attn.c_attn", C, 3 * C);
    linear(h + "attn.c_proj", C, C);
    norm(h + "ln_2");
    linear(h + "mlp.c_fc", C, 4 * C);
    linear(h + "mlp.c_proj", 4 * C, C);
  }
  norm("ln_f");
  return out;
}

}  // namespace tessera::runtime::hf
