// BERT's config.json (Hugging Face `BertConfig`) to Tessera's BertConfig and
// back, and the list of tensors a BertForMaskedLM checkpoint holds.
//
// A config is accepted only when Tessera's Bert computes exactly what
// transformers' BertForMaskedLM computes with it in eval mode; anything else is
// refused with a CheckpointError naming the key, its value and what is supported:
// model_type other than "bert", an architecture other than BertForMaskedLM or
// BertForPreTraining (whose MLM half is the same), hidden_act other than "gelu",
// position_embedding_type other than "absolute", is_decoder or
// add_cross_attention true, tie_word_embeddings false, or a size that is not a
// positive integer. Keys a file lacks take transformers' BertConfig defaults
// (BERT-base). The dropout probabilities are read and ignored: Tessera's Bert has
// no dropout, which is transformers' eval-mode forward. Keys that do not change
// the forward (token ids, torch_dtype, use_cache, classifier_dropout) are ignored.
//
// Pure functions of their arguments; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/models/bert.h"

namespace tessera::runtime::hf {

// Parses `config_json` (the text of config.json; `where` names it in errors).
// The result's seed is BertConfig's default (weights come from the checkpoint).
models::BertConfig parse_bert_config(const std::string& config_json, const std::string& where);

// parse_bert_config of `dir`/config.json; CheckpointError if it cannot be read.
models::BertConfig read_bert_config(const std::string& dir);

// config.json for `config`, as transformers writes it for a BertForMaskedLM
// (model_type bert, float32, no dropout). ConfigError if the config is invalid.
std::string bert_config_json(const models::BertConfig& config);

// One tensor of a BERT checkpoint: its name (also the name of Tessera's Bert
// parameter that holds it) and shape.
struct BertTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// Every parameter tensor of BertForMaskedLM for `config`, in save_pretrained's
// order, without the tied decoder (cls.predictions.decoder.{weight,bias}, which
// save_pretrained leaves out as copies of the word embedding and of
// cls.predictions.bias).
std::vector<BertTensor> bert_tensors(const models::BertConfig& config);

}  // namespace tessera::runtime::hf
