// TrainSettings: the `tessera train` view of a config — the model ("model": a
// GPT, or a Llama as train_llama.h describes),
// the data source ("data") and the loop ("train") — plus the embedded default
// config that trains a small byte-level GPT on /usr/share/common-licenses.
//
// Sections are parsed strictly like the rest of the config (unknown key ->
// ConfigError with the closest known key, wrong types and non-positive sizes
// rejected), so a bad file fails before any rank trains. Plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/models/gpt.h"
#include "tessera/models/llama.h"
#include "tessera/runtime/config.h"

namespace tessera::cli {

struct TrainSettings {
  // model.type: "gpt" (model) or "llama" (llama: train_llama.h;
  // model then carries only the block_size and vocab_size the data reads).
  std::string model_type = "gpt";
  models::GPTConfig model;
  models::LlamaConfig llama;
  // model.init_from_hf: a Hugging Face directory (GPT2LMHeadModel for the GPT,
  // LlamaForCausalLM for the Llama) whose config and weights start the run.
  std::string init_from_hf;
  // Data: a text file or directory (read as bytes), or a llm.c .bin token file.
  std::string data_path;
  std::string val_path;       // optional .bin for validation (text: split by val_fraction)
  double val_fraction = 0.1;
  // Loop.
  int64_t steps = 300;
  int64_t eval_interval = 100;   // 0: only at the end
  int64_t eval_iters = 10;
  int64_t checkpoint_interval = 100;  // 0: only at the end
  // SIGTERM/SIGINT: finish the step, save a checkpoint (if true), exit 128 + signal.
  bool checkpoint_on_preempt = true;
  std::string out_dir = "tessera_out";
  std::string metrics = "metrics.jsonl";  // relative to out_dir
  int64_t sample_length = 200;  // 0: no sample
  std::string sample_prompt = "The ";

  bool is_token_file() const;
  bool is_llama() const { return model_type == "llama"; }
  // "GPT 1234 params (2 layers, 128 embd)": the model, for the startup line.
  std::string describe_model(int64_t num_parameters) const;
  // Reads cfg.model / cfg.data / cfg.train over the defaults above.
  static TrainSettings from_config(const runtime::Config& cfg);
};

// The embedded default config (JSON text) used without --config.
const char* default_train_config();

// Parameters of the GPT that get no weight decay unless the config's
// optimizer.params.weight_decay_exclude says otherwise: biases, LayerNorms and the
// embeddings (minGPT's and nanoGPT's grouping).
const std::vector<std::string>& gpt_no_weight_decay();

// Whether `cfg`'s model.type is `type` (absent: "gpt"): how tessera train picks
// the task a config is for (resnet, dlrm, bert, or the language models).
bool model_type_is(const runtime::Config& cfg, const std::string& type);

}  // namespace tessera::cli
