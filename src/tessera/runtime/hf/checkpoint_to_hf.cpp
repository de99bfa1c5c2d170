#include "tessera/runtime/hf/checkpoint_to_hf.h"

#include <torch/nn/module.h>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/sharded_tensors.h"
#include "tessera/core/check.h"
#include "tessera/runtime/checkpoint_saver.h"
#include "tessera/runtime/hf/gpt2_checkpoint.h"
#include "tessera/runtime/hf/llama_checkpoint.h"

namespace tessera::runtime::hf {
namespace {

using nlohmann::json;

// Every parameter of `module` from the checkpoint, checked before any is
// written. Buffers are not read: the GPT's and the Llama's are functions of the
// config (causal mask, rotary tables), and a model-parallel checkpoint holds
// parameters only.
void fill_parameters(torch::nn::Module& module, const checkpoint::CheckpointTensors& all,
                     const std::string& step_dir) {
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  for (const auto& p : module.named_parameters(true)) {
    const std::string name = kCheckpointModelPrefix + p.key();
    TS_CHECK_T(CheckpointError, all.contains(name), "checkpoint '", step_dir, "' has no tensor '",
               name, "' for the model its client state describes");
    at::Tensor t = all.read(name);
    TS_CHECK_T(CheckpointError, t.sizes() == p.value().sizes(), "checkpoint '", step_dir, "': '",
               name, "' has shape ", t.sizes(), ", the model's parameter ", p.value().sizes());
    copies.emplace_back(p.value(), std::move(t));
  }
  at::NoGradGuard no_grad;
  for (auto& [param, value] : copies) param.copy_(value);
}

}  // namespace

json hf_model_description(const models::GPTConfig& gpt) {
  // GPT-2 always has biases; a bias-free GPT is exported with zero biases,
  // which is why the flag travels beside the config.
  return {{"type", "gpt2"}, {"config", gpt2_config_json(gpt)}, {"bias", gpt.bias}};
}

json hf_model_description(const models::LlamaConfig& llama) {
  return {{"type", "llama"}, {"config", llama_config_json(llama)}};
}

std::string export_checkpoint_to_hf(const std::string& dir, const std::string& out_dir,
                                    const HfExportOptions& options) {
  const std::string step_dir = checkpoint::resolve_step_dir(dir);
  const auto reader =
      checkpoint::CheckpointReader::open(step_dir, checkpoint::CheckpointReader::Verify::kIndex);
  const json client = reader.metadata().value("client_state", json::object());
  TS_CHECK_T(CheckpointError, client.is_object() && client.contains("hf_model"),
             "checkpoint '", step_dir, "' does not say which Hugging Face model it holds (no "
             "hf_model in its client state; tessera train records it for model.type gpt and "
             "llama): export from your program with export_gpt2 or export_llama instead");
  const json& hf = client["hf_model"];
  const std::string type = hf.value("type", "");
  const std::string config = hf.value("config", "");
  const std::string where = step_dir + " (client state hf_model)";
  const checkpoint::CheckpointTensors all(reader);
  if (type == "gpt2") {
    models::GPTConfig gpt = parse_gpt2_config(config, where).model;
    gpt.bias = hf.value("bias", true);
    models::GPT model(gpt);
    fill_parameters(*model, all, step_dir);
    export_gpt2(*model, out_dir, options);
  } else if (type == "llama") {
    models::Llama model(parse_llama_config(config, where));
    fill_parameters(*model, all, step_dir);
    export_llama(*model, out_dir, options);
  } else {
    TS_THROW(CheckpointError, "checkpoint '", step_dir, "' holds a model of type '", type,
             "'; export-hf writes gpt2 and llama");
  }
  return step_dir;
}

}  // namespace tessera::runtime::hf
