#include "tessera/parallel/embedding/embedding_bag_collection.h"

#include <ATen/ATen.h>

#include "tessera/core/check.h"

namespace tessera::parallel {

int64_t check_features(const std::vector<EmbeddingTableConfig>& tables,
                       const std::vector<JaggedIds>& features) {
  TS_CHECK_T(ConfigError, features.size() == tables.size(), "embedding lookup: ",
             features.size(), " features for ", tables.size(),
             " tables; pass one JaggedIds per table, in table order");
  int64_t batch = -1;
  for (size_t t = 0; t < tables.size(); ++t) {
    features[t].validate(tables[t].name, tables[t].rows);
    if (batch < 0) batch = features[t].batch_size();
    TS_CHECK_T(ConfigError, features[t].batch_size() == batch, "embedding lookup: feature '",
               tables[t].name, "' has ", features[t].batch_size(), " samples, the first has ",
               batch, "; every feature covers the same batch");
  }
  return batch < 0 ? 0 : batch;
}

EmbeddingBagCollection::EmbeddingBagCollection(std::vector<EmbeddingTableConfig> tables,
                                               uint64_t seed, RowwiseAdagradOptions optimizer)
    : tables_(std::move(tables)), optimizer_(optimizer) {
  for (const auto& t : tables_) {
    t.validate();
    weights_.push_back(init_table_block(t, seed, 0, t.rows, 0, t.dim));
    accums_.push_back(at::zeros({t.rows}, at::kFloat));
  }
}

std::vector<at::Tensor> EmbeddingBagCollection::forward(const std::vector<JaggedIds>& features) {
  check_features(tables_, features);
  last_ids_ = features;
  last_outputs_.clear();
  for (size_t t = 0; t < tables_.size(); ++t) {
    const auto& f = features[t];
    at::Tensor pooled = finish_pooling(pool_sums(weights_[t], f.lengths, f.values), f.lengths,
                                       tables_[t].pooling);
    last_outputs_.push_back(pooled.requires_grad_(true));
  }
  return last_outputs_;
}

void EmbeddingBagCollection::step() {
  std::vector<at::Tensor> grads;
  for (const auto& out : last_outputs_) grads.push_back(out.grad());
  apply_gradients(grads);
}

void EmbeddingBagCollection::apply_gradients(const std::vector<at::Tensor>& output_grads) {
  TS_CHECK_T(ConfigError, output_grads.size() == tables_.size() && !last_ids_.empty(),
             "EmbeddingBagCollection: apply_gradients takes one gradient per table of the "
             "last forward(); call forward() first");
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (!output_grads[t].defined()) continue;
    const auto& f = last_ids_[t];
    const at::Tensor g = scale_output_grad(output_grads[t], f.lengths, tables_[t].pooling);
    rowwise_adagrad_update(weights_[t], accums_[t], row_gradients(g, f.lengths, f.values), 0,
                           optimizer_);
  }
}

}  // namespace tessera::parallel
