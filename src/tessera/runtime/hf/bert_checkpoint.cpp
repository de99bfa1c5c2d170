#include "tessera/runtime/hf/bert_checkpoint.h"

#include <set>

#include "tessera/core/check.h"

namespace tessera::runtime::hf {

namespace {

void check_config_matches(const models::BertConfig& have, const models::BertConfig& file,
                          const std::string& dir) {
  auto same = [&](const char* field, auto a, auto b) {
    TS_CHECK_T(CheckpointError, a == b, "Hugging Face checkpoint ", dir, ": BertConfig.", field,
               " is ", b, " in its config.json but ", a,
               " in the model it is loaded into (build the model with load_bert, or from "
               "read_bert_config)");
  };
  same("vocab_size", have.vocab_size, file.vocab_size);
  same("hidden_size", have.hidden_size, file.hidden_size);
  same("num_hidden_layers", have.num_hidden_layers, file.num_hidden_layers);
  same("num_attention_heads", have.num_attention_heads, file.num_attention_heads);
  same("intermediate_size", have.intermediate_size, file.intermediate_size);
  same("max_position_embeddings", have.max_position_embeddings, file.max_position_embeddings);
  same("type_vocab_size", have.type_vocab_size, file.type_vocab_size);
  same("layer_norm_eps", have.layer_norm_eps, file.layer_norm_eps);
}

// What BertForMaskedLM.from_pretrained skips as well (see the header).
bool skipped(const std::string& name) {
  return name == "cls.predictions.decoder.weight" || name == "cls.predictions.decoder.bias" ||
         ends_with(name, "embeddings.position_ids") ||
         ends_with(name, "embeddings.token_type_ids") || name.rfind("bert.pooler.", 0) == 0 ||
         name.rfind("cls.seq_relationship.", 0) == 0;
}

std::set<std::string> checkpoint_names(const HfCheckpoint& ckpt,
                                       const std::set<std::string>& expected) {
  std::set<std::string> names;
  for (const auto& name : ckpt.names()) {
    if (skipped(name)) continue;
    TS_CHECK_T(CheckpointError, expected.count(name) != 0, "Hugging Face checkpoint ", ckpt.dir(),
               ": tensor ", name, " (in ", ckpt.file_of(name),
               ") has no place in Tessera's Bert (expected BertForMaskedLM's names such as "
               "bert.encoder.layer.0.attention.self.query.weight)");
    names.insert(name);
  }
  return names;
}

}  // namespace

void load_bert_into(models::BertImpl& model, const std::string& dir) {
  const models::BertConfig file = read_bert_config(dir);
  check_config_matches(model.config(), file, dir);
  const HfCheckpoint ckpt = HfCheckpoint::open(dir);
  const auto layout = bert_tensors(file);
  std::set<std::string> expected;
  for (const auto& t : layout) expected.insert(t.name);
  const auto names = checkpoint_names(ckpt, expected);

  auto params = model.named_parameters(/*recurse=*/true);
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (parameter, source)
  for (const auto& t : layout) {
    TS_CHECK_T(CheckpointError, names.count(t.name) != 0, "Hugging Face checkpoint ", dir,
               " has no tensor ", t.name,
               ", which Tessera's Bert needs; is the download "
               "complete?");
    auto source = checked_tensor(ckpt, t.name, t.shape, "config.json");
    auto* param = params.find(t.name);
    TS_INTERNAL_ASSERT(param != nullptr && param->sizes() == source.sizes(),
                       "Bert parameter layout of ", t.name);
    copies.emplace_back(*param, source);
  }
  // Everything checked: only now is the model written.
  at::NoGradGuard no_grad;
  for (auto& [param, source] : copies) param.copy_(source);
}

models::Bert load_bert(const std::string& dir) {
  models::Bert model(read_bert_config(dir));
  load_bert_into(*model, dir);
  return model;
}

void export_bert(const models::BertImpl& model, const std::string& dir,
                 const BertExportOptions& options) {
  const std::string config_text = bert_config_json(model.config());  // validates the config
  const auto params = model.named_parameters(/*recurse=*/true);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& t : bert_tensors(model.config())) {
    const auto* param = params.find(t.name);
    TS_INTERNAL_ASSERT(param != nullptr, "Bert has no parameter ", t.name);
    tensors.emplace_back(t.name, param->detach().to(at::kCPU, at::kFloat).contiguous());
  }
  export_hf_directory(dir, tensors, config_text, options, "export_bert");
}

}  // namespace tessera::runtime::hf
