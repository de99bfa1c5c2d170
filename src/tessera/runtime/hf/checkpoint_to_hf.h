// A `tessera train` checkpoint as a Hugging Face model directory, whatever the
// layout it was saved in (data parallel, ZeRO shards, tensor or pipeline
// parallel pieces): `tessera ckpt export-hf` and checkpoint.last_save_in_hf.
//
//   export_checkpoint_to_hf("out/step_300", "out/hf");
//   // Python: AutoModelForCausalLM.from_pretrained("out/hf")
//
// tessera train records which Hugging Face model its GPT or Llama is in the
// checkpoint's client state, under "hf_model": {"type": "gpt2" | "llama",
// "config": the text of its config.json, and for the GPT "bias"}
// (hf_model_description). The export
// builds that model, fills every parameter from the checkpoint's "model.<name>"
// tensors (reassembled from their pieces, each checked against its CRC-32C),
// and writes it with export_gpt2 / export_llama.
//
// CheckpointError naming the step and the problem when the step has no
// "hf_model" (a checkpoint of the C++ API, or of another model: export from the
// program with export_gpt2 / export_llama), a parameter is missing or
// misshapen, or the directory cannot be written.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tessera/models/gpt.h"
#include "tessera/models/llama.h"
#include "tessera/runtime/hf/hf_checkpoint.h"

namespace tessera::runtime::hf {

// The "hf_model" entry for a GPT (as GPT2LMHeadModel) or a Llama.
nlohmann::json hf_model_description(const models::GPTConfig& gpt);
nlohmann::json hf_model_description(const models::LlamaConfig& llama);

// `step_dir`: one step_<N> directory, or a checkpoint root (its latest step).
// Returns the step directory exported.
std::string export_checkpoint_to_hf(const std::string& step_dir, const std::string& out_dir,
                                    const HfExportOptions& options = {});

}  // namespace tessera::runtime::hf
