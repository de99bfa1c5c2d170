// ShardedEmbeddingBagCollection: the tables of an EmbeddingBagCollection placed
// over the ranks of a ProcessGroup by a ShardingPlan (sharding_planner.h), with
// the same results as the unsharded collection, bit for bit for sum pooling
// (see embedding_kernels.h for why the sums are exact).
//
// Collective: every rank of the group calls forward(), step() and gather_table()
// in the same order, with its own batch of ids (the same batch size on every rank;
// rank r's samples are samples r*B..(r+1)*B-1 of the global batch).
//
// forward() moves ids to the ranks that hold their rows and pooled rows back:
//   1. one all_to_all of the bag lengths (B per holder and table, so its sizes are
//      known everywhere): the receivers learn how many ids follow;
//   2. one all_to_all of the ids with those variable splits (ProcessGroup's
//      all_to_all takes per-rank split sizes: an all_to_all_v);
//   3. table- and column-wise shards pool whole bags and send them back with an
//      all_to_all (column shards are concatenated by the requester); row-wise
//      shards pool the ids they own into float64 partial sums over the global
//      batch, and one reduce_scatter adds them up into each rank's samples;
//      data-parallel tables pool locally.
// step() sends each output gradient the opposite way: all_to_all to table- and
// column-wise holders (a column shard gets the full-width gradient, so that its
// row-wise Adagrad accumulator is the whole row's, as in the unsharded table: this
// costs k times the backward traffic of a k-way column split), all_gather for
// row-wise shards, an all_reduce (float64) of the touched rows' gradients of
// data-parallel tables; then every holder updates only its touched rows.
// Not thread-safe; the group's thread rules apply.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <utility>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/parallel/embedding/embedding_kernels.h"
#include "tessera/parallel/embedding/embedding_types.h"
#include "tessera/parallel/embedding/sharding_planner.h"

namespace tessera::parallel {

class ShardedEmbeddingBagCollection {
 public:
  // The plan must cover `tables` in order, for the group's size (ConfigError).
  ShardedEmbeddingBagCollection(std::vector<EmbeddingTableConfig> tables, ShardingPlan plan,
                                std::shared_ptr<comm::ProcessGroup> group, uint64_t seed,
                                RowwiseAdagradOptions optimizer);

  // features[t]: this rank's ids of table t. Returns per table this rank's pooled
  // [B, dim] rows as leaf tensors that require grad. Collective.
  std::vector<at::Tensor> forward(const std::vector<JaggedIds>& features);
  // Updates from the last forward's outputs' .grad() (missing: zeros). Collective.
  void step();
  void apply_gradients(const std::vector<at::Tensor>& output_grads);

  // Table t's full weights [rows, dim] and accumulator [rows] on every rank
  // (an all_reduce of the whole table: for tests and small tables). Collective.
  std::pair<at::Tensor, at::Tensor> gather_table(size_t table);

  const ShardingPlan& plan() const { return plan_; }
  const std::vector<EmbeddingTableConfig>& tables() const { return tables_; }
  // Bytes of the weights and accumulators this rank holds.
  int64_t local_bytes() const;

 private:
  struct Shard {
    bool held = false;
    int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
    at::Tensor weight;  // [row_end - row_begin, col_end - col_begin]
    at::Tensor accum;   // [row_end - row_begin]
  };
  void exchange_ids(const std::vector<JaggedIds>& features);
  std::vector<at::Tensor> pool_remote();
  void return_pooled(const std::vector<at::Tensor>& sums, std::vector<at::Tensor>& pooled);
  void reduce_row_wise(const std::vector<at::Tensor>& sums, std::vector<at::Tensor>& pooled);
  void backward_all_to_all(const std::vector<at::Tensor>& grads);
  void backward_row_wise(const std::vector<at::Tensor>& grads);
  void backward_data_parallel(const std::vector<at::Tensor>& grads);
  int64_t width_on(size_t table, int rank) const;

  std::vector<EmbeddingTableConfig> tables_;
  ShardingPlan plan_;
  std::shared_ptr<comm::ProcessGroup> group_;
  RowwiseAdagradOptions optimizer_;
  std::vector<Shard> shards_;
  std::vector<std::vector<size_t>> held_by_;   // rank -> row/table/column-wise tables it holds
  std::vector<std::vector<size_t>> pooled_by_; // rank -> table/column-wise tables it holds
  std::vector<size_t> row_wise_, data_parallel_;
  // The last forward: this rank's ids, and for each table it holds the bags of the
  // global batch (source rank order) with the row indexes local to its shard.
  int64_t batch_ = 0;
  std::vector<JaggedIds> local_;
  std::vector<at::Tensor> held_lengths_, held_rows_, outputs_;
};

}  // namespace tessera::parallel
