// ZeRO partition math: pure functions over parameter sizes, no tensors, no
// communication.
//
// A unit is a list of parameters laid end to end in one flat buffer (parameter i
// at offset(i)). The buffer is padded to a multiple of world * alignment elements
// so it splits into `world` equal, aligned, contiguous ranges; rank r owns
// [r * shard, (r + 1) * shard). A parameter may straddle two or more ranges; a
// rank's range may hold pieces of several parameters, or only padding (a small
// unit over many ranks). Equal ranges make every reduce-scatter and all-gather
// of a unit one collective with equal shards.
//
//   FlatPartition p({300, 5, 1000}, /*world=*/4, /*alignment=*/16);
//   p.shard_numel();      // 336: 1305 elements padded to 1344, over 4 ranks
//   p.pieces_of_rank(0);  // param 0 [0, 300), param 1 [0, 5), param 2 [0, 31)
//   p.pieces_of_rank(1);  // param 2 [31, 367)
//   p.pieces_of_rank(3);  // param 2 [703, 1000), then 39 elements of padding
//
// Values; thread-safe to share.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::runtime::zero {

// One contiguous piece of one parameter inside a rank's range.
struct Piece {
  size_t param = 0;          // index into the unit's parameter list
  int64_t param_offset = 0;  // first element of the piece within the flattened parameter
  int64_t shard_offset = 0;  // where it sits within the rank's shard
  int64_t numel = 0;
  bool operator==(const Piece& o) const {
    return param == o.param && param_offset == o.param_offset && shard_offset == o.shard_offset &&
           numel == o.numel;
  }
};

class FlatPartition {
 public:
  // numels: the parameters' element counts (0 allowed); world >= 1; alignment
  // >= 1 elements (16 keeps every range 64-byte aligned for float32).
  FlatPartition(std::vector<int64_t> numels, int world, int64_t alignment = 16);

  int world() const { return world_; }
  size_t num_params() const { return numels_.size(); }
  int64_t numel(size_t param) const { return numels_[param]; }
  // Elements of all parameters together, and after padding.
  int64_t total_numel() const { return total_; }
  int64_t padded_numel() const { return shard_ * world_; }
  // Elements each rank owns (padding included).
  int64_t shard_numel() const { return shard_; }
  // Where parameter `param` starts in the flat buffer.
  int64_t offset(size_t param) const { return offsets_[param]; }
  // Rank r's range in the flat buffer: [range_begin(r), range_begin(r) + shard_numel()).
  int64_t range_begin(int rank) const { return shard_ * rank; }
  // The pieces of parameters inside rank r's range, in flat order.
  std::vector<Piece> pieces_of_rank(int rank) const;
  // The ranks whose ranges hold part of parameter `param`, in order.
  std::vector<int> owners(size_t param) const;
  // Rank owning flat element `flat_index` (< padded_numel()).
  int owner_of(int64_t flat_index) const { return static_cast<int>(flat_index / shard_); }

 private:
  std::vector<int64_t> numels_;
  std::vector<int64_t> offsets_;
  int world_;
  int64_t total_ = 0;
  int64_t shard_ = 0;
};

// Groups consecutive parameters into units of about `bucket_numel` elements each,
// walking from the last parameter to the first (backward produces the last
// layers' gradients first, so the first unit is ready first). A parameter larger
// than the bucket gets a unit of its own. Returns, per unit, the parameter
// indices in registration order. Every index with numel > 0 appears once;
// empty parameters are left out.
std::vector<std::vector<size_t>> bucket_units(const std::vector<int64_t>& numels,
                                              int64_t bucket_numel);

}  // namespace tessera::runtime::zero
