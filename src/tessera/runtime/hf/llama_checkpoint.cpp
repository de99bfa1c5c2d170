#include "tessera/runtime/hf/llama_checkpoint.h"

#include <map>
#include <set>

#include "tessera/core/check.h"

namespace tessera::runtime::hf {

namespace {

const std::string kLlamaLmHead = "lm_head.weight";

// Every field that shapes the weights or the forward must agree.
void check_config_matches(const models::LlamaConfig& have, const models::LlamaConfig& file,
                          const std::string& dir) {
  auto same = [&](const char* field, auto a, auto b) {
    TS_CHECK_T(CheckpointError, a == b, "Hugging Face checkpoint ", dir, ": LlamaConfig.", field,
               " is ", b, " in its config.json but ", a,
               " in the model it is loaded into (build the model with load_llama, or from "
               "read_llama_config)");
  };
  same("vocab_size", have.vocab_size, file.vocab_size);
  same("hidden_size", have.hidden_size, file.hidden_size);
  same("intermediate_size", have.intermediate_size, file.intermediate_size);
  same("num_hidden_layers", have.num_hidden_layers, file.num_hidden_layers);
  same("num_attention_heads", have.num_attention_heads, file.num_attention_heads);
  same("num_key_value_heads", have.num_key_value_heads, file.num_key_value_heads);
  same("head_dim", have.effective_head_dim(), file.effective_head_dim());
  same("max_position_embeddings", have.max_position_embeddings, file.max_position_embeddings);
  same("rms_norm_eps", have.rms_norm_eps, file.rms_norm_eps);
  same("rope_theta", have.rope_theta, file.rope_theta);
  same("rope_scaling.type", std::string(models::RopeScaling::type_name(have.rope_scaling.type)),
       std::string(models::RopeScaling::type_name(file.rope_scaling.type)));
  TS_CHECK_T(CheckpointError, have.rope_scaling == file.rope_scaling, "Hugging Face checkpoint ",
             dir,
             ": LlamaConfig.rope_scaling's factors differ between its config.json and the "
             "model it is loaded into");
  same("tie_word_embeddings", have.tie_word_embeddings, file.tie_word_embeddings);
  same("attention_bias", have.attention_bias, file.attention_bias);
  same("mlp_bias", have.mlp_bias, file.mlp_bias);
}

// The checkpoint's tensors that the model takes, checked for names it has no
// place for. A tied model ignores a stored lm_head.weight, as transformers does.
std::set<std::string> checkpoint_names(const HfCheckpoint& ckpt,
                                       const std::set<std::string>& expected, bool tied) {
  std::set<std::string> names;
  for (const auto& name : ckpt.names()) {
    if (ends_with(name, ".rotary_emb.inv_freq") || (tied && name == kLlamaLmHead)) continue;
    TS_CHECK_T(CheckpointError, expected.count(name) != 0, "Hugging Face checkpoint ", ckpt.dir(),
               ": tensor ", name, " (in ", ckpt.file_of(name),
               ") has no place in Tessera's Llama (expected LlamaForCausalLM's names such as "
               "model.layers.0.self_attn.q_proj.weight)");
    names.insert(name);
  }
  return names;
}

}  // namespace

void load_llama_parameters(const models::LlamaConfig& config, const LlamaNamedParameters& params,
                           const std::string& dir, const LlamaSliceFn& slice) {
  const models::LlamaConfig file = read_llama_config(dir);
  check_config_matches(config, file, dir);
  const HfCheckpoint ckpt = HfCheckpoint::open(dir);
  const auto layout = llama_tensors(file);
  std::set<std::string> expected;
  for (const auto& t : layout) expected.insert(t.name);
  const auto names = checkpoint_names(ckpt, expected, file.tie_word_embeddings);
  std::map<std::string, at::Tensor> held(params.begin(), params.end());

  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (parameter, source)
  for (const auto& t : layout) {
    TS_CHECK_T(CheckpointError, names.count(t.name) != 0, "Hugging Face checkpoint ", dir,
               " has no tensor ", t.name, ", which Tessera's Llama needs",
               t.name == kLlamaLmHead ? " (config.json sets tie_word_embeddings false)"
                                 : "; is the download complete?");
    auto source = checked_tensor(ckpt, t.name, t.shape, "config.json");
    auto param = held.find(t.name);
    if (param == held.end()) continue;  // another pipeline stage's
    // A view of the mapped file: slicing reads only the rank's part.
    at::Tensor part = slice(t.name, source);
    TS_CHECK_T(CheckpointError, param->second.sizes() == part.sizes(), "Hugging Face checkpoint ",
               dir, ": ", t.name, " sliced to ", part.sizes(), " does not fit the parameter ",
               param->second.sizes());
    copies.emplace_back(param->second, part);
  }
  // Everything checked: only now is the model written (copy_ converts 16-bit
  // files to float32 and moves them to the parameters' device).
  at::NoGradGuard no_grad;
  for (auto& [param, source] : copies) param.copy_(source);
}

void load_llama_into(models::LlamaImpl& model, const std::string& dir) {
  LlamaNamedParameters params;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) params.emplace_back(p.key(), p.value());
  load_llama_parameters(model.config(), params, dir,
                        [](const std::string&, const at::Tensor& whole) { return whole; });
}

models::Llama load_llama(const std::string& dir) {
  models::Llama model(read_llama_config(dir));
  load_llama_into(*model, dir);
  return model;
}

void export_llama(const models::LlamaImpl& model, const std::string& dir,
                  const LlamaExportOptions& options) {
  const std::string config_text = llama_config_json(model.config());  // validates the config
  const auto params = model.named_parameters(/*recurse=*/true);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& t : llama_tensors(model.config())) {
    const auto* param = params.find(t.name);
    TS_INTERNAL_ASSERT(param != nullptr, "Llama has no parameter ", t.name);
    tensors.emplace_back(t.name, param->detach().to(at::kCPU, at::kFloat).contiguous());
  }
  export_hf_directory(dir, tensors, config_text, options, "export_llama");
}

}  // namespace tessera::runtime::hf
