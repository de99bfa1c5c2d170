// EmbeddingBagCollection: embedding tables in one process, each pooling the
// feature of its name, trained by row-wise sparse Adagrad. The reference the
// sharded collection (sharded_embedding_bag_collection.h) is tested against, and
// what a single-process program uses.
//
//   EmbeddingBagCollection ebc(tables, /*seed=*/7, {.lr = 0.05});
//   auto pooled = ebc.forward(ids);      // per table [B, dim], requires grad
//   loss(pooled...).backward();
//   ebc.step();                          // updates only the rows the batch touched
//
// forward() returns leaf tensors that require grad; step() reads their .grad()
// (a table whose output got none is left alone), turns it into gradients of the
// touched rows (never a dense table gradient) and applies rowwise_adagrad_update.
// Weights start from init_table_block(seed), the same numbers every sharding of
// the same tables starts from. Not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "tessera/parallel/embedding/embedding_kernels.h"
#include "tessera/parallel/embedding/embedding_types.h"

namespace tessera::parallel {

class EmbeddingBagCollection {
 public:
  EmbeddingBagCollection(std::vector<EmbeddingTableConfig> tables, uint64_t seed,
                         RowwiseAdagradOptions optimizer);

  // features[t] are table t's ids (ConfigError on bad ids or batch sizes).
  std::vector<at::Tensor> forward(const std::vector<JaggedIds>& features);
  // The update from the last forward's outputs' gradients.
  void step();
  // The same from explicit gradients of those outputs (undefined: table skipped).
  void apply_gradients(const std::vector<at::Tensor>& output_grads);

  const std::vector<EmbeddingTableConfig>& tables() const { return tables_; }
  const at::Tensor& weight(size_t table) const { return weights_[table]; }
  const at::Tensor& accumulator(size_t table) const { return accums_[table]; }

 private:
  std::vector<EmbeddingTableConfig> tables_;
  RowwiseAdagradOptions optimizer_;
  std::vector<at::Tensor> weights_;  // [rows, dim] float32
  std::vector<at::Tensor> accums_;   // [rows] float32
  std::vector<JaggedIds> last_ids_;
  std::vector<at::Tensor> last_outputs_;
};

// Checks a batch of features against the tables (count, ids, equal batch sizes);
// returns the batch size.
int64_t check_features(const std::vector<EmbeddingTableConfig>& tables,
                       const std::vector<JaggedIds>& features);

}  // namespace tessera::parallel
