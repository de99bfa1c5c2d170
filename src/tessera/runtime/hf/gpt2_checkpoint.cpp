#include "tessera/runtime/hf/gpt2_checkpoint.h"

#include <map>
#include <set>

#include "tessera/core/check.h"
#include "tessera/runtime/hf/hf_checkpoint.h"

namespace tessera::runtime::hf {

namespace {

const std::string kPrefix = "transformer.";
const std::string kLmHead = "lm_head.weight";

// Fields that shape the weights or the forward must agree; bias is handled per
// tensor (a bias-free model takes a checkpoint whose biases are all zero).
void check_config_matches(const models::GPTConfig& have, const models::GPTConfig& file,
                          const std::string& dir) {
  auto same = [&](const char* field, auto a, auto b) {
    TS_CHECK_T(CheckpointError, a == b, "Hugging Face checkpoint ", dir, ": GPTConfig.", field,
               " is ", b, " in its config.json but ", a,
               " in the model it is loaded into (build the model with load_gpt2, or from "
               "read_gpt2_config)");
  };
  same("vocab_size", have.vocab_size, file.vocab_size);
  same("block_size", have.block_size, file.block_size);
  same("n_layer", have.n_layer, file.n_layer);
  same("n_head", have.n_head, file.n_head);
  same("n_embd", have.n_embd, file.n_embd);
  same("gelu_tanh", have.gelu_tanh, file.gelu_tanh);
  same("layer_norm_eps", have.layer_norm_eps, file.layer_norm_eps);
}

// The checkpoint's tensors by their GPT2Model name (prefix stripped), skipping
// the attention-mask buffers; lm_head.weight keeps its name.
std::map<std::string, std::string> checkpoint_names(const HfCheckpoint& ckpt,
                                                    const std::set<std::string>& expected) {
  std::map<std::string, std::string> names;
  for (const auto& name : ckpt.names()) {
    const bool prefixed = name.compare(0, kPrefix.size(), kPrefix) == 0;
    const std::string key = prefixed ? name.substr(kPrefix.size()) : name;
    if (ends_with(key, ".attn.bias") || ends_with(key, ".attn.masked_bias")) continue;
    TS_CHECK_T(CheckpointError, expected.count(key) != 0 || (key == kLmHead && !prefixed),
               "Hugging Face checkpoint ", ckpt.dir(), ": tensor ", name, " (in ",
               ckpt.file_of(name),
               ") has no place in Tessera's GPT (expected GPT-2's names such as "
               "transformer.h.0.attn.c_attn.weight, and lm_head.weight)");
    auto [it, added] = names.emplace(key, name);
    TS_CHECK_T(CheckpointError, added, "Hugging Face checkpoint ", ckpt.dir(), " holds both ",
               it->second, " and ", name);
  }
  return names;
}

// The untied head transformers would use must be the token embedding itself.
void check_head(const HfCheckpoint& ckpt, const std::map<std::string, std::string>& names,
                const Gpt2HfConfig& hf) {
  auto head = names.find(kLmHead);
  if (head == names.end()) {
    TS_CHECK_T(CheckpointError, hf.tie_word_embeddings, "Hugging Face checkpoint ", ckpt.dir(),
               ": config.json sets tie_word_embeddings false but there is no lm_head.weight");
    return;
  }
  const auto& c = hf.model;
  auto lm = checked_tensor(ckpt, head->second, {c.vocab_size, c.n_embd}, "config.json");
  // Tied: transformers ignores the file's copy, and so does Tessera.
  if (hf.tie_word_embeddings) return;
  auto wte = ckpt.tensor(names.at("wte.weight"));
  TS_CHECK_T(CheckpointError, at::equal(lm.to(at::kFloat), wte.to(at::kFloat)),
             "Hugging Face checkpoint ", ckpt.dir(),
             ": lm_head.weight differs from transformer.wte.weight and tie_word_embeddings is "
             "false; Tessera's GPT ties its head to the token embedding, so it cannot hold "
             "this model exactly");
}

}  // namespace

void load_gpt2_parameters(const models::GPTConfig& config, const NamedParameters& params,
                          const std::string& dir, const SliceFn& slice) {
  Gpt2ImportOptions options;
  options.dropout = config.dropout;  // dropout is the model's, not the file's
  const Gpt2HfConfig hf = read_gpt2_config(dir, options);
  check_config_matches(config, hf.model, dir);
  const HfCheckpoint ckpt = HfCheckpoint::open(dir);
  const auto layout = gpt2_tensors(hf.model);
  std::set<std::string> expected;
  for (const auto& t : layout) expected.insert(t.name);
  const auto names = checkpoint_names(ckpt, expected);
  std::map<std::string, at::Tensor> held(params.begin(), params.end());

  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (parameter, source)
  for (const auto& t : layout) {
    auto it = names.find(t.name);
    TS_CHECK_T(CheckpointError, it != names.end(), "Hugging Face checkpoint ", dir,
               " has no tensor ", kPrefix, t.name, " (or ", t.name,
               "), which Tessera's GPT needs; is the download complete?");
    auto source = checked_tensor(ckpt, it->second, t.hf_shape, "config.json");
    if (t.transposed) source = source.t();
    if (t.linear_bias && !config.bias) {
      TS_CHECK_T(CheckpointError, source.count_nonzero().item<int64_t>() == 0,
                 "Hugging Face checkpoint ", dir, ": ", it->second,
                 " is not zero but the model has no Linear biases (GPTConfig.bias false)");
      continue;
    }
    auto param = held.find(t.name);
    if (param == held.end()) continue;  // another pipeline stage's
    // A view of the mapped file: slicing reads only the rank's part.
    at::Tensor part = slice(t.name, source);
    TS_CHECK_T(CheckpointError, param->second.sizes() == part.sizes(), "Hugging Face checkpoint ",
               dir, ": ", it->second, " sliced to ", part.sizes(), " does not fit the parameter ",
               t.name, " ", param->second.sizes());
    copies.emplace_back(param->second, part);
  }
  check_head(ckpt, names, hf);

  // Everything checked: only now is the model written.
  at::NoGradGuard no_grad;
  for (auto& [param, source] : copies) param.copy_(source);
}

void load_gpt2_into(models::GPTImpl& model, const std::string& dir) {
  NamedParameters params;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) params.emplace_back(p.key(), p.value());
  load_gpt2_parameters(model.config(), params, dir,
                       [](const std::string&, const at::Tensor& whole) { return whole; });
}

models::GPT load_gpt2(const std::string& dir, const Gpt2ImportOptions& options) {
  const Gpt2HfConfig hf = read_gpt2_config(dir, options);
  models::GPT model(hf.model);
  load_gpt2_into(*model, dir);
  return model;
}

namespace {

// The model's tensors under GPT2LMHeadModel's names and layouts, on the CPU.
std::vector<std::pair<std::string, at::Tensor>> export_tensors(const models::GPTImpl& model) {
  const auto params = model.named_parameters(/*recurse=*/true);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& t : gpt2_tensors(model.config())) {
    const auto* param = params.find(t.name);
    at::Tensor value;
    if (param == nullptr) {
      TS_INTERNAL_ASSERT(t.linear_bias, "GPT has no parameter ", t.name);
      value = at::zeros(t.hf_shape, at::kFloat);  // GPT-2 always has biases
    } else {
      value = param->detach().to(at::kCPU, at::kFloat);
      if (t.transposed) value = value.t();
      value = value.contiguous();
    }
    out.emplace_back(kPrefix + t.name, std::move(value));
  }
  return out;
}

}  // namespace

void export_gpt2(const models::GPTImpl& model, const std::string& dir,
                 const Gpt2ExportOptions& options) {
  const std::string config_text = gpt2_config_json(model.config());  // validates the config
  export_hf_directory(dir, export_tensors(model), config_text, options, "export_gpt2");
}

}  // namespace tessera::runtime::hf
