#include "tessera/parallel/embedding/sharded_embedding_bag_collection.h"

#include <ATen/ATen.h>

#include "tessera/core/check.h"
#include "tessera/parallel/embedding/embedding_bag_collection.h"

namespace tessera::parallel {
namespace {

bool pooled_remotely(ShardingType t) {
  return t == ShardingType::kTableWise || t == ShardingType::kColumnWise;
}

int64_t sum_of(const at::Tensor& t) { return t.numel() == 0 ? 0 : t.sum().item<int64_t>(); }

at::Tensor cat_or_empty(const std::vector<at::Tensor>& parts, at::ScalarType dtype) {
  return parts.empty() ? at::empty({0}, dtype) : at::cat(parts);
}

}  // namespace

ShardedEmbeddingBagCollection::ShardedEmbeddingBagCollection(
    std::vector<EmbeddingTableConfig> tables, ShardingPlan plan,
    std::shared_ptr<comm::ProcessGroup> group, uint64_t seed, RowwiseAdagradOptions optimizer)
    : tables_(std::move(tables)), plan_(std::move(plan)), group_(std::move(group)),
      optimizer_(optimizer) {
  const int world = group_->size();
  TS_CHECK_T(ConfigError, plan_.world == world && plan_.tables.size() == tables_.size(),
             "sharded embeddings: the plan is for ", plan_.tables.size(), " tables on ",
             plan_.world, " ranks, but there are ", tables_.size(), " tables on ", world,
             "; plan with the same tables and PlannerOptions::world = the group's size");
  held_by_.resize(static_cast<size_t>(world));
  pooled_by_.resize(static_cast<size_t>(world));
  for (size_t t = 0; t < tables_.size(); ++t) {
    const auto& s = plan_.tables[t];
    TS_CHECK_T(ConfigError, s.table == tables_[t].name && s.rows == tables_[t].rows &&
                   s.dim == tables_[t].dim,
               "sharded embeddings: plan entry ", t, " ('", s.table, "') does not match table '",
               tables_[t].name, "'");
    if (s.type == ShardingType::kDataParallel) data_parallel_.push_back(t);
    if (s.type == ShardingType::kRowWise) row_wise_.push_back(t);
    for (int r : s.ranks) {
      if (s.type == ShardingType::kDataParallel) continue;
      held_by_[static_cast<size_t>(r)].push_back(t);
      if (pooled_remotely(s.type)) pooled_by_[static_cast<size_t>(r)].push_back(t);
    }
    Shard shard;
    shard.held = s.shard_of(group_->rank(), &shard.row_begin, &shard.row_end, &shard.col_begin,
                            &shard.col_end);
    if (shard.held) {
      shard.weight = init_table_block(tables_[t], seed, shard.row_begin, shard.row_end,
                                      shard.col_begin, shard.col_end);
      shard.accum = at::zeros({shard.row_end - shard.row_begin}, at::kFloat);
    }
    shards_.push_back(std::move(shard));
  }
}

int64_t ShardedEmbeddingBagCollection::width_on(size_t table, int rank) const {
  int64_t r0, r1, c0, c1;
  return plan_.tables[table].shard_of(rank, &r0, &r1, &c0, &c1) ? c1 - c0 : 0;
}

int64_t ShardedEmbeddingBagCollection::local_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : shards_) {
    if (s.held) bytes += s.weight.nbytes() + s.accum.nbytes();
  }
  return bytes;
}

// Steps 1 and 2 of forward (see the header): lengths, then ids, to their holders.
void ShardedEmbeddingBagCollection::exchange_ids(const std::vector<JaggedIds>& features) {
  const int world = group_->size(), me = group_->rank();
  const int64_t b = batch_;
  std::vector<at::Tensor> send_lengths, send_ids;
  std::vector<int64_t> length_splits_in, length_splits_out, id_splits_in;
  for (int r = 0; r < world; ++r) {
    int64_t ids_to_r = 0;
    for (size_t t : held_by_[static_cast<size_t>(r)]) {
      const auto& f = features[t];
      at::Tensor lengths = f.lengths, ids = f.values;
      if (plan_.tables[t].type == ShardingType::kRowWise) {
        const int64_t lo = plan_.tables[t].offsets[r], hi = plan_.tables[t].offsets[r + 1];
        const at::Tensor mine = at::logical_and(ids >= lo, ids < hi);
        const at::Tensor bag = at::repeat_interleave(at::arange(b, at::kLong), f.lengths);
        lengths = at::bincount(bag.masked_select(mine), {}, b).to(at::kLong);
        ids = ids.masked_select(mine) - lo;
      }
      send_lengths.push_back(lengths);
      send_ids.push_back(ids);
      ids_to_r += ids.numel();
    }
    length_splits_in.push_back(b * static_cast<int64_t>(held_by_[static_cast<size_t>(r)].size()));
    length_splits_out.push_back(b * static_cast<int64_t>(held_by_[static_cast<size_t>(me)].size()));
    id_splits_in.push_back(ids_to_r);
  }
  const size_t held = held_by_[static_cast<size_t>(me)].size();
  at::Tensor lengths_in = at::empty({world * static_cast<int64_t>(held) * b}, at::kLong);
  group_->all_to_all(lengths_in, cat_or_empty(send_lengths, at::kLong), length_splits_out,
                     length_splits_in)->wait();
  // What each source sends me, per table: the sum of its lengths.
  const at::Tensor per_bag = lengths_in.view({world, static_cast<int64_t>(held), b});
  const at::Tensor counts = per_bag.sum(2);  // [world, held]
  std::vector<int64_t> id_splits_out;
  for (int s = 0; s < world; ++s) id_splits_out.push_back(sum_of(counts[s]));
  at::Tensor ids_in = at::empty({sum_of(counts)}, at::kLong);
  group_->all_to_all(ids_in, cat_or_empty(send_ids, at::kLong), id_splits_out, id_splits_in)
      ->wait();
  held_lengths_.assign(tables_.size(), at::Tensor());
  held_rows_.assign(tables_.size(), at::Tensor());
  std::vector<std::vector<at::Tensor>> lengths_parts(held), id_parts(held);
  int64_t pos = 0;
  for (int s = 0; s < world; ++s) {
    for (size_t i = 0; i < held; ++i) {
      const int64_t n = counts[s][static_cast<int64_t>(i)].item<int64_t>();
      lengths_parts[i].push_back(per_bag[s][static_cast<int64_t>(i)]);
      id_parts[i].push_back(ids_in.narrow(0, pos, n));
      pos += n;
    }
  }
  for (size_t i = 0; i < held; ++i) {
    const size_t t = held_by_[static_cast<size_t>(me)][i];
    held_lengths_[t] = at::cat(lengths_parts[i]);
    held_rows_[t] = at::cat(id_parts[i]);
  }
}

// Step 3 of forward: pooled rows of every table this rank does not pool locally.
std::vector<at::Tensor> ShardedEmbeddingBagCollection::pool_remote() {
  const int me = group_->rank();
  std::vector<at::Tensor> pooled(tables_.size());
  std::vector<at::Tensor> sums(tables_.size());
  for (size_t t : held_by_[static_cast<size_t>(me)]) {
    sums[t] = pool_sums(shards_[t].weight, held_lengths_[t], held_rows_[t]);
  }
  bool any_pooled_remotely = false;  // the same on every rank: it comes from the plan
  for (const auto& tables : pooled_by_) any_pooled_remotely |= !tables.empty();
  if (any_pooled_remotely) return_pooled(sums, pooled);
  if (!row_wise_.empty()) reduce_row_wise(sums, pooled);
  return pooled;
}

// Table- and column-wise: whole bags pooled by the holders, sent back to the
// requesters with one all_to_all; column slices concatenated in holder order.
void ShardedEmbeddingBagCollection::return_pooled(const std::vector<at::Tensor>& sums,
                                                  std::vector<at::Tensor>& pooled) {
  const int world = group_->size(), me = group_->rank();
  const int64_t b = batch_;
  const auto& mine = pooled_by_[static_cast<size_t>(me)];
  std::vector<at::Tensor> finished(tables_.size()), send;
  int64_t my_width = 0;
  for (size_t t : mine) {
    finished[t] = finish_pooling(sums[t], held_lengths_[t], tables_[t].pooling);
    my_width += width_on(t, me);
  }
  std::vector<int64_t> splits_in, splits_out;
  int64_t total = 0;
  for (int s = 0; s < world; ++s) {
    for (size_t t : mine) send.push_back(finished[t].narrow(0, s * b, b).reshape({-1}));
    splits_in.push_back(b * my_width);
    int64_t from_s = 0;
    for (size_t t : pooled_by_[static_cast<size_t>(s)]) from_s += width_on(t, s);
    splits_out.push_back(b * from_s);
    total += b * from_s;
  }
  at::Tensor recv = at::empty({total}, at::kFloat);
  group_->all_to_all(recv, cat_or_empty(send, at::kFloat), splits_out, splits_in)->wait();
  std::vector<std::vector<at::Tensor>> columns(tables_.size());
  int64_t pos = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t t : pooled_by_[static_cast<size_t>(r)]) {
      const int64_t w = width_on(t, r);
      columns[t].push_back(recv.narrow(0, pos, b * w).view({b, w}));
      pos += b * w;
    }
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (!columns[t].empty()) pooled[t] = at::cat(columns[t], 1);
  }
}

// Row-wise: float64 partial sums over the global batch, one reduce_scatter adds
// them up into each rank's samples, rounded once to float32 by their owner.
void ShardedEmbeddingBagCollection::reduce_row_wise(const std::vector<at::Tensor>& sums,
                                                    std::vector<at::Tensor>& pooled) {
  const int world = group_->size();
  const int64_t b = batch_;
  std::vector<at::Tensor> send;
  int64_t width = 0;
  for (size_t t : row_wise_) width += tables_[t].dim;
  for (int s = 0; s < world; ++s) {
    for (size_t t : row_wise_) send.push_back(sums[t].narrow(0, s * b, b).reshape({-1}));
  }
  at::Tensor mine = at::empty({b * width}, at::kDouble);
  group_->reduce_scatter(mine, at::cat(send))->wait();
  int64_t pos = 0;
  for (size_t t : row_wise_) {
    const int64_t d = tables_[t].dim;
    pooled[t] = finish_pooling(mine.narrow(0, pos, b * d).view({b, d}), local_[t].lengths,
                               tables_[t].pooling);
    pos += b * d;
  }
}

std::vector<at::Tensor> ShardedEmbeddingBagCollection::forward(
    const std::vector<JaggedIds>& features) {
  batch_ = check_features(tables_, features);
  local_ = features;
  exchange_ids(features);
  std::vector<at::Tensor> pooled = pool_remote();
  for (size_t t : data_parallel_) {
    pooled[t] = finish_pooling(pool_sums(shards_[t].weight, features[t].lengths,
                                         features[t].values),
                               features[t].lengths, tables_[t].pooling);
  }
  outputs_.clear();
  for (auto& p : pooled) outputs_.push_back(p.contiguous().requires_grad_(true));
  return outputs_;
}

void ShardedEmbeddingBagCollection::step() {
  std::vector<at::Tensor> grads;
  for (size_t t = 0; t < outputs_.size(); ++t) {
    at::Tensor g = outputs_[t].grad();
    grads.push_back(g.defined() ? g : at::zeros_like(outputs_[t].detach()));
  }
  apply_gradients(grads);
}

void ShardedEmbeddingBagCollection::apply_gradients(const std::vector<at::Tensor>& output_grads) {
  TS_CHECK_T(ConfigError, output_grads.size() == tables_.size() && !local_.empty(),
             "ShardedEmbeddingBagCollection: apply_gradients takes one gradient per table of "
             "the last forward(); call forward() first");
  std::vector<at::Tensor> grads(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    const auto& g = output_grads[t];
    TS_CHECK_T(ConfigError, g.defined() && g.dim() == 2 && g.size(0) == batch_ &&
                   g.size(1) == tables_[t].dim,
               "sharded embeddings: the gradient of table '", tables_[t].name,
               "' must be [", batch_, ", ", tables_[t].dim, "] on every rank (zeros for none)");
    grads[t] = scale_output_grad(g, local_[t].lengths, tables_[t].pooling);
  }
  backward_all_to_all(grads);
  backward_row_wise(grads);
  backward_data_parallel(grads);
}

void ShardedEmbeddingBagCollection::backward_all_to_all(const std::vector<at::Tensor>& grads) {
  const int world = group_->size(), me = group_->rank();
  const int64_t b = batch_;
  std::vector<at::Tensor> send;
  std::vector<int64_t> splits_in, splits_out;
  int64_t mine_width = 0;
  for (size_t t : pooled_by_[static_cast<size_t>(me)]) mine_width += tables_[t].dim;
  bool any = false;
  for (int r = 0; r < world; ++r) {
    int64_t to_r = 0;
    for (size_t t : pooled_by_[static_cast<size_t>(r)]) {
      send.push_back(grads[t].reshape({-1}));
      to_r += b * tables_[t].dim;
      any = true;
    }
    splits_in.push_back(to_r);
    splits_out.push_back(b * mine_width);
  }
  if (!any) return;  // no table- or column-wise table anywhere: every rank skips
  at::Tensor recv = at::empty({world * b * mine_width}, at::kFloat);
  group_->all_to_all(recv, cat_or_empty(send, at::kFloat), splits_out, splits_in)->wait();
  std::vector<std::vector<at::Tensor>> parts(tables_.size());
  int64_t pos = 0;
  for (int s = 0; s < world; ++s) {
    for (size_t t : pooled_by_[static_cast<size_t>(me)]) {
      const int64_t d = tables_[t].dim;
      parts[t].push_back(recv.narrow(0, pos, b * d).view({b, d}));
      pos += b * d;
    }
  }
  for (size_t t : pooled_by_[static_cast<size_t>(me)]) {
    auto& shard = shards_[t];
    rowwise_adagrad_update(shard.weight, shard.accum,
                           row_gradients(at::cat(parts[t]), held_lengths_[t], held_rows_[t]),
                           shard.col_begin, optimizer_);
  }
}

void ShardedEmbeddingBagCollection::backward_row_wise(const std::vector<at::Tensor>& grads) {
  if (row_wise_.empty()) return;
  const int world = group_->size();
  const int64_t b = batch_;
  std::vector<at::Tensor> send;
  int64_t width = 0;
  for (size_t t : row_wise_) {
    send.push_back(grads[t].reshape({-1}));
    width += tables_[t].dim;
  }
  at::Tensor all = at::empty({world * b * width}, at::kFloat);
  group_->all_gather_into(all, at::cat(send))->wait();
  std::vector<std::vector<at::Tensor>> parts(tables_.size());
  int64_t pos = 0;
  for (int s = 0; s < world; ++s) {
    for (size_t t : row_wise_) {
      const int64_t d = tables_[t].dim;
      parts[t].push_back(all.narrow(0, pos, b * d).view({b, d}));
      pos += b * d;
    }
  }
  for (size_t t : row_wise_) {
    auto& shard = shards_[t];
    rowwise_adagrad_update(shard.weight, shard.accum,
                           row_gradients(at::cat(parts[t]), held_lengths_[t], held_rows_[t]), 0,
                           optimizer_);
  }
}

// Replicated tables: every rank adds its bags' gradients into a float64 buffer of
// the table's rows plus a touch count per row, one all_reduce sums them over the
// job (exact, see embedding_kernels.h), and each replica updates the touched rows.
void ShardedEmbeddingBagCollection::backward_data_parallel(const std::vector<at::Tensor>& grads) {
  if (data_parallel_.empty()) return;
  std::vector<at::Tensor> parts;
  for (size_t t : data_parallel_) {
    const auto& f = local_[t];
    const int64_t rows = tables_[t].rows, d = tables_[t].dim;
    const at::Tensor bag = at::repeat_interleave(at::arange(batch_, at::kLong), f.lengths);
    at::Tensor sums = at::zeros({rows, d}, at::kDouble);
    sums.index_add_(0, f.values, grads[t].to(at::kDouble).index_select(0, bag));
    at::Tensor touched = at::zeros({rows}, at::kDouble);
    touched.index_add_(0, f.values, at::ones({f.values.numel()}, at::kDouble));
    parts.push_back(sums.reshape({-1}));
    parts.push_back(touched);
  }
  at::Tensor buffer = at::cat(parts);
  group_->all_reduce(buffer)->wait();
  int64_t pos = 0;
  for (size_t t : data_parallel_) {
    const int64_t rows = tables_[t].rows, d = tables_[t].dim;
    const at::Tensor sums = buffer.narrow(0, pos, rows * d).view({rows, d});
    const at::Tensor touched = buffer.narrow(0, pos + rows * d, rows);
    pos += rows * d + rows;
    RowGradients g;
    g.rows = at::nonzero(touched > 0).reshape({-1}).contiguous();
    g.grads = sums.index_select(0, g.rows).to(at::kFloat).contiguous();
    rowwise_adagrad_update(shards_[t].weight, shards_[t].accum, g, 0, optimizer_);
  }
}

std::pair<at::Tensor, at::Tensor> ShardedEmbeddingBagCollection::gather_table(size_t table) {
  TS_CHECK_LT(table, tables_.size(), "gather_table: table index");
  const auto& cfg = tables_[table];
  const auto& s = plan_.tables[table];
  const auto& shard = shards_[table];
  at::Tensor weight = at::zeros({cfg.rows, cfg.dim}, at::kFloat);
  at::Tensor accum = at::zeros({cfg.rows}, at::kFloat);
  // Each element comes from exactly one rank, so the float sum only adds zeros.
  const bool first_holder = !s.ranks.empty() && s.ranks[0] == group_->rank();
  const bool contributes = shard.held && (s.type == ShardingType::kRowWise ||
                                          s.type == ShardingType::kColumnWise || first_holder);
  if (contributes) {
    weight.narrow(0, shard.row_begin, shard.row_end - shard.row_begin)
        .narrow(1, shard.col_begin, shard.col_end - shard.col_begin)
        .copy_(shard.weight);
    if (s.type != ShardingType::kColumnWise || first_holder) {
      accum.narrow(0, shard.row_begin, shard.row_end - shard.row_begin).copy_(shard.accum);
    }
  }
  group_->all_reduce(weight)->wait();
  group_->all_reduce(accum)->wait();
  return {weight, accum};
}

}  // namespace tessera::parallel
