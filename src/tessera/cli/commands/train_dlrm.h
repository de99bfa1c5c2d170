// `tessera train --task dlrm` (or a config whose model.type is "dlrm"): a DLRM
// (models/dlrm.h) on a generated click dataset with a known signal
// (data/click_dataset.h). The embedding tables are sharded over the ranks by the
// planner (parallel/embedding/sharding_planner.h) and trained by row-wise sparse
// Adagrad; the MLPs train data-parallel through the Engine with the config's
// optimizer. Rank 0 prints the sharding plan, progress lines and, at the end,
// "held-out AUC 0.xxxx" over the held-out samples (data/auc.h, exact), next to
// the AUC of the hidden model itself on the same samples; metrics.jsonl in
// train.out_dir gets loss per print step and the AUC.
//
// Config sections (docs/models.md lists every key):
//   model {type "dlrm", bottom_mlp, top_mlp, seed,
//          embedding {lr, eps, pooling, budget_bytes_per_rank,
//                     data_parallel_max_bytes, column_wise_min_dim, sharding}}
//   data {samples, held_out, dense_features, cardinalities, max_ids_per_feature,
//         signal_features, seed}
//   train {steps, out_dir, metrics}
// Every problem is a ConfigError before the first step.
#pragma once

#include <string>

#include "tessera/runtime/config.h"

namespace tessera::cli {

// The embedded config of --task dlrm.
const char* default_dlrm_config();

// Trains in this worker; returns the exit code. steps > 0 and out override the config.
int train_dlrm(runtime::Config cfg, int64_t steps, const std::string& out);

}  // namespace tessera::cli
