// Hugging Face BERT checkpoints in and out of Tessera's Bert (models/bert.h), in
// one process.
//
//   auto bert = tessera::runtime::hf::load_bert("path/to/bert");   // config + weights
//   ... train ...
//   tessera::runtime::hf::export_bert(*bert, "out/bert-tuned");
//   // Python: BertForMaskedLM.from_pretrained("out/bert-tuned")
//
// Import reads config.json (bert_config.h says what is accepted) and the
// safetensors files (hf_checkpoint.h: one file or shards with their index). The
// checkpoint's names are Tessera's parameter names; 16-bit files are converted to
// float32. Every tensor's presence, shape and dtype is checked before any
// parameter is written, so a refused checkpoint leaves the model as it was.
// Tensors Tessera's Bert keeps elsewhere or computes without are skipped, as
// BertForMaskedLM.from_pretrained skips them: the tied decoder
// (cls.predictions.decoder.weight, .bias), the position_ids and token_type_ids
// buffers, the pooler (bert.pooler.*) and the next-sentence head
// (cls.seq_relationship.*) of BertForPreTraining files. Any other tensor
// Tessera's Bert has no place for is an error.
//
// Export writes what BertForMaskedLM.save_pretrained writes: config.json and
// model.safetensors (or shards with an index) with metadata {"format": "pt"},
// without the tied decoder.
//
// Errors are CheckpointError naming the directory, the tensor or key, and the
// expected value. Not thread-safe for one model; distinct models may load at once.
#pragma once

#include <string>

#include "tessera/models/bert.h"
#include "tessera/runtime/hf/bert_config.h"
#include "tessera/runtime/hf/hf_checkpoint.h"

namespace tessera::runtime::hf {

// Builds a Bert from `dir`'s config.json and loads its weights.
models::Bert load_bert(const std::string& dir);

// Loads `dir`'s weights into an existing Bert on any device. CheckpointError,
// with the model untouched, when its config differs from the checkpoint's in a
// field that shapes the weights or the forward (the message names the field and
// both values), or a tensor is missing, misshapen, not floating point, or unknown.
void load_bert_into(models::BertImpl& model, const std::string& dir);

using BertExportOptions = HfExportOptions;  // max_shard_bytes, overwrite

// Writes `model` as a BertForMaskedLM directory at `dir`, atomically as
// export_hf_directory (hf_checkpoint.h) says. CheckpointError when `dir` exists,
// is not empty and overwrite is false, or on an I/O error.
void export_bert(const models::BertImpl& model, const std::string& dir,
                 const BertExportOptions& options = {});

}  // namespace tessera::runtime::hf
