#include "tessera/cli/commands/train_settings.h"

#include "tessera/cli/commands/train_llama.h"
#include "tessera/core/check.h"
#include "tessera/runtime/hf/gpt2_config.h"

namespace tessera::cli {
namespace {

using runtime::check_known_keys;
using runtime::read_bool;
using runtime::read_number;
using runtime::read_positive_int;
using runtime::read_int;
using runtime::read_string;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void read_data(const runtime::Config& cfg, TrainSettings& s) {
  const auto& d = cfg.data;
  check_known_keys(d, {"path", "val_path", "val_fraction"}, "data");
  s.data_path = read_string(d, "path", "data", "/usr/share/common-licenses");
  s.val_path = read_string(d, "val_path", "data", "");
  s.val_fraction = read_number(d, "val_fraction", "data", s.val_fraction);
  TS_CHECK_T(ConfigError, s.val_fraction >= 0 && s.val_fraction < 1,
             "config key 'data.val_fraction' must be in [0, 1), got ", s.val_fraction);
}

void read_train(const runtime::Config& cfg, TrainSettings& s) {
  const auto& t = cfg.train;
  const std::string w = "train";
  check_known_keys(t,
                   {"steps", "eval_interval", "eval_iters", "checkpoint_interval", "out_dir",
                    "metrics", "sample_length", "sample_prompt", "checkpoint_on_preempt"},
                   w);
  s.checkpoint_on_preempt = read_bool(t, "checkpoint_on_preempt", w, s.checkpoint_on_preempt);
  s.steps = read_positive_int(t, "steps", w, s.steps);
  s.eval_interval = read_int(t, "eval_interval", w, s.eval_interval);
  s.eval_iters = read_positive_int(t, "eval_iters", w, s.eval_iters);
  s.checkpoint_interval = read_int(t, "checkpoint_interval", w, s.checkpoint_interval);
  TS_CHECK_T(ConfigError, s.eval_interval >= 0 && s.checkpoint_interval >= 0,
             "config keys 'train.eval_interval' and 'train.checkpoint_interval' must be >= 0 "
             "(0: only at the end)");
  s.out_dir = read_string(t, "out_dir", w, s.out_dir);
  s.metrics = read_string(t, "metrics", w, s.metrics);
  s.sample_length = read_int(t, "sample_length", w, s.sample_length);
  TS_CHECK_T(ConfigError, s.sample_length >= 0, "config key 'train.sample_length' must be >= 0");
  s.sample_prompt = read_string(t, "sample_prompt", w, s.sample_prompt);
  TS_CHECK_T(ConfigError, !s.sample_prompt.empty(), "config key 'train.sample_prompt' is empty");
}

// model.init_from_hf for the GPT: the sizes come from the directory's
// config.json (a GPT2LMHeadModel), so a size key beside it could only disagree.
void read_gpt2_sizes(const runtime::Config& cfg, TrainSettings& s) {
  const auto& m = cfg.model;
  for (const char* key : {"vocab_size", "block_size", "n_layer", "n_head", "n_embd", "bias"}) {
    TS_CHECK_T(ConfigError, !m.contains(key), "config key 'model.", key, "' conflicts with "
               "'model.init_from_hf': the sizes come from ", s.init_from_hf,
               "/config.json; remove the key");
  }
  runtime::hf::Gpt2ImportOptions options;
  if (m.contains("dropout")) options.dropout = read_number(m, "dropout", "model", 0.0);
  s.model = runtime::hf::read_gpt2_config(s.init_from_hf, options).model;
}

// Megatron's MoE keys, in the "model" section (models/moe.h).
void read_moe(const nlohmann::json& m, models::MoEConfig& moe) {
  moe.num_experts = read_int(m, "num_experts", "model", 0);
  moe.router_topk = read_positive_int(m, "moe_router_topk", "model", moe.router_topk);
  moe.score_function =
      read_string(m, "moe_router_score_function", "model", moe.score_function);
  moe.aux_loss_coeff = read_number(m, "moe_aux_loss_coeff", "model", 0.0);
  moe.z_loss_coeff = read_number(m, "moe_z_loss_coeff", "model", 0.0);
  // null (Megatron's default) or absent: dropless.
  const bool dropless =
      !m.contains("moe_expert_capacity_factor") || m["moe_expert_capacity_factor"].is_null();
  moe.capacity_factor = dropless ? 0.0 : read_number(m, "moe_expert_capacity_factor", "model", 0.0);
  moe.token_drop_policy = read_string(m, "moe_token_drop_policy", "model", moe.token_drop_policy);
  moe.expert_intermediate_size = read_int(m, "moe_ffn_hidden_size", "model", 0);
  moe.shared_expert_intermediate_size =
      read_int(m, "moe_shared_expert_intermediate_size", "model", 0);
  moe.validate();
}

}  // namespace

// Sized for `make demo`: two ranks on two cores reach a loss well under 2.5 nats
// per byte in a few minutes (from ln 256 = 5.5 at initialization).
const char* default_train_config() {
  return R"({
  "train_micro_batch_size_per_gpu": 16,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "steps_per_print": 10,
  "seed": 1337,
  "optimizer": {"type": "AdamW",
                "params": {"lr": 0.003, "betas": [0.9, 0.99], "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupCosineLR",
                "params": {"warmup_num_steps": 20, "warmup_type": "linear",
                           "total_num_steps": 300, "cos_min_ratio": 0.1}},
  "model": {"n_layer": 2, "n_head": 4, "n_embd": 128, "block_size": 64},
  "data": {"path": "/usr/share/common-licenses", "val_fraction": 0.1},
  "train": {"steps": 300, "eval_interval": 100, "eval_iters": 8, "checkpoint_interval": 100,
            "out_dir": "tessera_out", "sample_length": 200}
})";
}

bool model_type_is(const runtime::Config& cfg, const std::string& type) {
  return cfg.model.is_object() && cfg.model.value("type", std::string("gpt")) == type;
}

const std::vector<std::string>& gpt_no_weight_decay() {
  static const std::vector<std::string> patterns = {"*.bias", "*ln_*", "wte.*", "wpe.*"};
  return patterns;
}

bool TrainSettings::is_token_file() const { return ends_with(data_path, ".bin"); }

std::string TrainSettings::describe_model(int64_t num_parameters) const {
  if (is_llama()) {
    return c10::str("Llama ", num_parameters, " params (", llama.num_hidden_layers, " layers, ",
                    llama.hidden_size, " hidden, ", llama.num_attention_heads, " heads, ",
                    llama.num_key_value_heads, " kv heads)");
  }
  return c10::str("GPT ", num_parameters, " params (", model.n_layer, " layers, ", model.n_embd,
                  " embd)");
}

TrainSettings TrainSettings::from_config(const runtime::Config& cfg) {
  TrainSettings s;
  const auto& m = cfg.model;
  s.model_type = read_string(m, "type", "model", "gpt");
  TS_CHECK_T(ConfigError, s.model_type == "gpt" || s.model_type == "llama",
             "config key 'model.type' is '", s.model_type, "': use gpt, llama or resnet");
  if (s.is_llama()) {
    read_data(cfg, s);
    read_llama_settings(cfg, s);
    read_train(cfg, s);
    return s;
  }
  check_known_keys(m, {"type", "vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout",
                       "bias", "fused_attention", "seed", "init_from_hf", "num_experts",
                       "moe_router_topk", "moe_router_score_function", "moe_aux_loss_coeff",
                       "moe_z_loss_coeff", "moe_expert_capacity_factor", "moe_token_drop_policy",
                       "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size"},
                   "model");
  read_moe(m, s.model.moe);
  s.init_from_hf = read_string(m, "init_from_hf", "model", "");
  if (!s.init_from_hf.empty()) {
    read_gpt2_sizes(cfg, s);
  } else {
    s.model.block_size = read_positive_int(m, "block_size", "model", s.model.block_size);
    s.model.n_layer = read_positive_int(m, "n_layer", "model", s.model.n_layer);
    s.model.n_head = read_positive_int(m, "n_head", "model", s.model.n_head);
    s.model.n_embd = read_positive_int(m, "n_embd", "model", s.model.n_embd);
    s.model.bias = read_bool(m, "bias", "model", s.model.bias);
  }
  s.model.dropout = read_number(m, "dropout", "model", s.model.dropout);
  s.model.fused_attention =
      read_bool(m, "fused_attention", "model", s.model.fused_attention);
  s.model.seed = static_cast<uint64_t>(read_int(m, "seed", "model", static_cast<int64_t>(cfg.seed)));
  if (cfg.precision.enabled()) {
    TS_CHECK_T(ConfigError, cfg.precision.dtype == "bf16" || !cfg.model_parallel.enabled(),
               "config 'fp16' (loss scaling) is not supported with tensor or pipeline "
               "parallelism yet; use bf16 there, or set tensor/pipeline_model_parallel_size to 1");
    s.model.compute_dtype = cfg.precision.dtype == "fp16" ? at::kHalf : at::kBFloat16;
  }
  const auto& ac = cfg.activation_checkpointing;
  if (ac.enabled) {
    TS_CHECK_T(ConfigError, cfg.zero.stage != 3,
               "activation_checkpointing is not supported with zero_optimization.stage 3 yet "
               "(its gathered parameters would be released before the recompute); use stage 0-2");
    TS_CHECK_T(ConfigError, ac.number_checkpoints <= s.model.n_layer,
               "activation_checkpointing.number_checkpoints ", ac.number_checkpoints,
               " exceeds model.n_layer ", s.model.n_layer, ": each segment needs a block");
    s.model.activation_checkpoints = ac.number_checkpoints > 0 ? ac.number_checkpoints : s.model.n_layer;
  }

  read_data(cfg, s);
  // Bytes need 256 ids; token files default to GPT-2's vocabulary.
  if (s.init_from_hf.empty()) {
    s.model.vocab_size = read_positive_int(m, "vocab_size", "model",
                                           s.is_token_file() ? 50257 : 256);
  }
  TS_CHECK_T(ConfigError, s.is_token_file() || s.model.vocab_size >= 256,
             "config key 'model.vocab_size' is ", s.model.vocab_size,
             " but text data is read as bytes (256 ids): use at least 256");
  s.model.validate();

  read_train(cfg, s);
  return s;
}

}  // namespace tessera::cli
