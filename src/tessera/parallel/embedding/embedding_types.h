// Embedding tables and their input, in TorchRec's vocabulary.
//
// An EmbeddingTableConfig names one table of `rows` x `dim` float32 weights; it
// pools one sparse feature of the same name. The feature's ids for a batch of B
// samples come as a JaggedIds: lengths[b] ids for sample b, all ids flat in
// `values` (TorchRec's KeyedJaggedTensor is one JaggedIds per key). A collection
// returns, per table, the pooled [B, dim] rows (sum or mean over each sample's
// ids; an empty bag pools to zeros).
//
// RowwiseAdagradOptions are FBGEMM's `rowwise_adagrad`: one accumulator scalar
// per row, grown by the mean over the row of the squared gradient.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::parallel {

enum class PoolingType { kSum, kMean };

struct EmbeddingTableConfig {
  std::string name;
  int64_t rows = 0;
  int64_t dim = 0;
  PoolingType pooling = PoolingType::kSum;
  // Weights and accumulator bytes of the whole table (float32 each).
  int64_t bytes() const { return rows * (dim + 1) * 4; }
  void validate() const;  // ConfigError naming the table and the field
};

// One feature's ids for a batch: lengths [B] int64, values [sum(lengths)] int64.
struct JaggedIds {
  at::Tensor lengths;
  at::Tensor values;
  int64_t batch_size() const { return lengths.numel(); }
  // ConfigError unless lengths/values are 1-D int64 CPU tensors that agree and
  // every id lies in [0, rows).
  void validate(const std::string& table, int64_t rows) const;
};

struct RowwiseAdagradOptions {
  double lr = 0.01;
  double eps = 1e-8;
};

}  // namespace tessera::parallel
