// `tessera train --task digits` (or a config whose model.type is "resnet"): the
// ResNet of models/resnet.h trained on the 8x8 handwritten digits
// (data/digits_dataset.h) with DDP and, by default, SyncBatchNorm, through the
// same Engine and config keys as the GPT (comm hooks, local SGD, delayed
// averaging, ZeRO). Rank 0 prints progress lines and, at the end,
// "test accuracy 0.9xxx" over the 360 test images, writes metrics.jsonl
// (loss, lr, comm_bytes per step; test_accuracy at the end) and saves a
// checkpoint in train.out_dir.
//
// Config sections: model {type "resnet", widths [16, 32, 64], blocks_per_stage 1,
// sync_batchnorm true, seed}, data {path: digits.csv.gz}, train {steps,
// out_dir, metrics}. Every problem is a ConfigError before the first step.
#pragma once

#include <string>

#include "tessera/runtime/config.h"

namespace tessera::cli {

// The embedded config of --task digits.
const char* default_digits_config();

// Trains in this worker; returns the exit code. steps > 0 and out override the config.
int train_digits(runtime::Config cfg, int64_t steps, const std::string& out);

}  // namespace tessera::cli
