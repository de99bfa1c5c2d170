#include "tessera/runtime/zero/partition.h"

#include <algorithm>

#include "tessera/core/check.h"

namespace tessera::runtime::zero {

FlatPartition::FlatPartition(std::vector<int64_t> numels, int world, int64_t alignment)
    : numels_(std::move(numels)), world_(world) {
  TS_CHECK_T(ConfigError, world_ >= 1, "ZeRO partition: world size must be >= 1, got ", world_);
  TS_CHECK_T(ConfigError, alignment >= 1, "ZeRO partition: alignment must be >= 1, got ", alignment);
  offsets_.reserve(numels_.size());
  for (int64_t n : numels_) {
    TS_CHECK_T(ConfigError, n >= 0, "ZeRO partition: a parameter has ", n, " elements");
    offsets_.push_back(total_);
    total_ += n;
  }
  const int64_t quantum = alignment * world_;
  const int64_t padded = std::max<int64_t>(quantum, (total_ + quantum - 1) / quantum * quantum);
  shard_ = padded / world_;
}

std::vector<Piece> FlatPartition::pieces_of_rank(int rank) const {
  TS_CHECK_T(ConfigError, rank >= 0 && rank < world_, "ZeRO partition: rank ", rank,
             " outside a world of ", world_);
  const int64_t lo = range_begin(rank), hi = lo + shard_;
  std::vector<Piece> out;
  // First parameter ending after lo.
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), lo);
  size_t i = it == offsets_.begin() ? 0 : static_cast<size_t>(it - offsets_.begin()) - 1;
  for (; i < numels_.size() && offsets_[i] < hi; ++i) {
    const int64_t begin = std::max(lo, offsets_[i]);
    const int64_t end = std::min(hi, offsets_[i] + numels_[i]);
    if (end <= begin) continue;
    out.push_back({i, begin - offsets_[i], begin - lo, end - begin});
  }
  return out;
}

std::vector<int> FlatPartition::owners(size_t param) const {
  TS_INTERNAL_ASSERT(param < numels_.size());
  std::vector<int> out;
  if (numels_[param] == 0) return out;
  const int first = owner_of(offsets_[param]);
  const int last = owner_of(offsets_[param] + numels_[param] - 1);
  for (int r = first; r <= last; ++r) out.push_back(r);
  return out;
}

std::vector<std::vector<size_t>> bucket_units(const std::vector<int64_t>& numels,
                                              int64_t bucket_numel) {
  TS_CHECK_T(ConfigError, bucket_numel > 0, "ZeRO bucket size must be positive, got ",
             bucket_numel);
  std::vector<std::vector<size_t>> units;
  std::vector<size_t> open;
  int64_t open_numel = 0;
  auto close = [&] {
    if (open.empty()) return;
    std::reverse(open.begin(), open.end());
    units.push_back(std::move(open));
    open.clear();
    open_numel = 0;
  };
  for (size_t k = numels.size(); k-- > 0;) {
    if (numels[k] <= 0) continue;
    if (numels[k] >= bucket_numel) close();  // large: alone, the small ones go first
    open.push_back(k);
    open_numel += numels[k];
    if (open_numel >= bucket_numel) close();
  }
  close();
  return units;
}

}  // namespace tessera::runtime::zero
