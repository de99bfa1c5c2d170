#include "tessera/cli/commands/train_data.h"

#include <ATen/ATen.h>

#include "tessera/core/check.h"
#include "tessera/data/byte_text_dataset.h"
#include "tessera/data/token_file_dataset.h"

namespace tessera::cli {

TrainData::TrainData(const TrainSettings& s, int world, int rank, uint64_t seed)
    : block_(s.model.block_size), world_(world), rank_(rank) {
  if (s.is_token_file()) {
    train_ = std::make_unique<data::TokenFileDataset>(s.data_path);
    if (!s.val_path.empty()) val_ = std::make_unique<data::TokenFileDataset>(s.val_path);
  } else {
    data::ByteTextOptions o;
    o.val_fraction = s.val_fraction;
    train_ = std::make_unique<data::ByteTextDataset>(s.data_path, o);
    if (s.val_fraction > 0) {
      o.split = data::Split::kVal;
      val_ = std::make_unique<data::ByteTextDataset>(s.data_path, o);
    }
  }
  TS_CHECK_T(ConfigError, train_->num_blocks(block_) >= world, "data '", s.data_path, "' holds ",
             train_->num_tokens(), " tokens: too few for one block of ", block_,
             " per rank; use more data or a smaller model.block_size");
  if (val_ && val_->num_blocks(block_) < 1) val_.reset();
  data::DistributedSamplerOptions so;
  so.seed = seed;
  sampler_ = std::make_unique<data::DistributedSampler>(train_->num_blocks(block_), world, rank, so);
}

std::pair<at::Tensor, at::Tensor> TrainData::next_batch(int64_t batch) {
  std::vector<int64_t> idx = sampler_->next_batch(batch);
  while (static_cast<int64_t>(idx.size()) < batch) {
    // End of epoch: finish the batch from the next one (same on every rank).
    if (sampler_->remaining() == 0) sampler_->set_epoch(sampler_->epoch() + 1);
    auto more = sampler_->next_batch(batch - static_cast<int64_t>(idx.size()));
    idx.insert(idx.end(), more.begin(), more.end());
  }
  return train_->get_blocks(idx, block_);
}

std::pair<at::Tensor, at::Tensor> TrainData::eval_batch(int64_t i, int64_t batch) {
  if (!val_) return {};
  const int64_t n = val_->num_blocks(block_);
  std::vector<int64_t> idx;
  for (int64_t b = 0; b < batch; ++b) idx.push_back(((i * batch + b) * world_ + rank_) % n);
  return val_->get_blocks(idx, block_);
}

}  // namespace tessera::cli
