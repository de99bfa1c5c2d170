#include "tessera/cli/commands/train_llama.h"

#include <algorithm>

#include "tessera/core/check.h"
#include "tessera/runtime/hf/llama_checkpoint.h"

namespace tessera::cli {
namespace {

using runtime::read_int;
using runtime::read_positive_int;
using runtime::read_string;

// The keys of the model section that size the model (config.json's names).
const std::vector<std::string>& size_keys() {
  static const std::vector<std::string> keys = {"vocab_size",
                                                "hidden_size",
                                                "intermediate_size",
                                                "num_hidden_layers",
                                                "num_attention_heads",
                                                "num_key_value_heads",
                                                "head_dim",
                                                "max_position_embeddings",
                                                "rms_norm_eps",
                                                "rope_theta",
                                                "rope_scaling",
                                                "tie_word_embeddings",
                                                "attention_bias",
                                                "mlp_bias",
                                                "initializer_range"};
  return keys;
}

// The size keys read exactly as a config.json is (llama_config.h), over
// LlamaConfig's defaults rather than transformers' 7B ones; any refusal is a
// ConfigError naming the key.
models::LlamaConfig parse_sizes(const nlohmann::json& m, int64_t default_vocab) {
  const models::LlamaConfig d;
  nlohmann::json j = {{"model_type", "llama"},
                      {"vocab_size", default_vocab},
                      {"hidden_size", d.hidden_size},
                      {"intermediate_size", d.intermediate_size},
                      {"num_hidden_layers", d.num_hidden_layers},
                      {"num_attention_heads", d.num_attention_heads},
                      {"max_position_embeddings", d.max_position_embeddings},
                      {"rms_norm_eps", d.rms_norm_eps}};
  for (const auto& key : size_keys()) {
    if (m.contains(key)) j[key] = m[key];
  }
  // GQA off unless asked: as many kv heads as query heads.
  if (!m.contains("num_key_value_heads")) j["num_key_value_heads"] = j["num_attention_heads"];
  try {
    return runtime::hf::parse_llama_config(j.dump(), "config key 'model'");
  } catch (const CheckpointError& e) {
    throw ConfigError(e.what_without_backtrace());
  }
}

void check_supported(const runtime::Config& cfg) {
  TS_CHECK_T(ConfigError, !cfg.precision.enabled(),
             "model.type llama trains in float32 for now: remove bf16/fp16 (and --bf16/--fp16)");
  TS_CHECK_T(ConfigError, !cfg.activation_checkpointing.enabled,
             "model.type llama does not support activation_checkpointing yet: remove it");
}

}  // namespace

void read_llama_settings(const runtime::Config& cfg, TrainSettings& s) {
  const auto& m = cfg.model;
  std::vector<std::string> known = {"type", "seed", "block_size", "init_from_hf"};
  known.insert(known.end(), size_keys().begin(), size_keys().end());
  runtime::check_known_keys(m, known, "model");
  check_supported(cfg);
  s.init_from_hf = read_string(m, "init_from_hf", "model", "");
  if (!s.init_from_hf.empty()) {
    for (const auto& key : size_keys()) {
      TS_CHECK_T(ConfigError, !m.contains(key), "config key 'model.", key,
                 "' conflicts with "
                 "'model.init_from_hf': the sizes come from ",
                 s.init_from_hf, "/config.json; remove the key");
    }
    s.llama = runtime::hf::read_llama_config(s.init_from_hf);
  } else {
    s.llama = parse_sizes(m, s.is_token_file() ? 50257 : 256);
  }
  s.llama.seed =
      static_cast<uint64_t>(read_int(m, "seed", "model", static_cast<int64_t>(cfg.seed)));
  const int64_t max_pos = s.llama.max_position_embeddings;
  s.model.block_size = read_positive_int(m, "block_size", "model", std::min<int64_t>(max_pos, 256));
  TS_CHECK_T(ConfigError, s.model.block_size <= max_pos, "config key 'model.block_size' is ",
             s.model.block_size, " but the Llama's max_position_embeddings is ", max_pos);
  s.model.vocab_size = s.llama.vocab_size;
  TS_CHECK_T(ConfigError, s.is_token_file() || s.llama.vocab_size >= 256,
             "the Llama's vocab_size is ", s.llama.vocab_size,
             " but text data is read as bytes (256 ids): use at least 256");
}

models::Llama build_llama(const TrainSettings& s) {
  models::Llama model(s.llama);
  if (!s.init_from_hf.empty()) runtime::hf::load_llama_into(*model, s.init_from_hf);
  return model;
}

const std::vector<std::string>& llama_no_weight_decay() {
  static const std::vector<std::string> patterns = {"*norm.weight", "*.bias", "*embed_tokens*"};
  return patterns;
}

}  // namespace tessera::cli
