// `tessera train --task mlm` (or a config whose model.type is "bert"): masked-
// language-model pretraining of the BERT of models/bert.h on byte-level text
// (data/byte_text_dataset.h: vocabulary 256 bytes plus [MASK] = 256), through
// the data-parallel Engine and its config keys (DDP, ZeRO stages 1 and 2, the
// optimizers including Lamb, schedules, clipping).
//
// Masking (BERT's recipe): in each block of seq_len bytes, every position is
// chosen with probability train.mask_prob (0.15); a chosen position's input
// becomes [MASK] with probability 0.8, a random byte with 0.1, and stays itself
// with 0.1. The loss is the cross entropy over the chosen positions only.
// Evaluation every train.eval_interval steps and at the end masks
// train.eval_iters fixed held-out batches the same way each time and reports the
// val loss and the masked-LM accuracy (argmax == original byte over the chosen
// positions, all ranks together): rank 0 prints "masked-LM accuracy 0.xxxx" and
// appends {"step", "val_loss", "mlm_accuracy"} to metrics.jsonl next to the
// per-print {"step", "loss", "lr", "comm_bytes"} records. A checkpoint of the
// Engine is saved in train.out_dir at the end.
//
// Config sections: model {type "bert", hidden_size, num_hidden_layers,
// num_attention_heads, intermediate_size, seq_len, seed}, data {path,
// val_fraction}, train {steps, out_dir, metrics, eval_interval, eval_iters,
// mask_prob}. Tensor and pipeline parallelism and ZeRO stage 3 are refused
// (ConfigError): BERT's layers take a padding mask beside the hidden states,
// which the layer-partitioning machinery of those modes does not carry. Every
// problem is a ConfigError before the first step.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>

#include "tessera/runtime/config.h"

namespace tessera::cli {

// The embedded config of --task mlm.
const char* default_mlm_config();

// BERT's masking of `tokens` (int64 [B, T], ids < random_vocab) with draws from
// `gen`: returns (inputs, labels) where labels hold the original id at the chosen
// positions and -100 elsewhere. Deterministic for a given generator state.
std::pair<at::Tensor, at::Tensor> mask_for_mlm(const at::Tensor& tokens, double mask_prob,
                                               int64_t mask_id, int64_t random_vocab,
                                               at::Generator& gen);

// Trains in this worker; returns the exit code. steps > 0 and out override the config.
int train_mlm(runtime::Config cfg, int64_t steps, const std::string& out);

}  // namespace tessera::cli
