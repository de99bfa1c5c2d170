// DistributedSampler: which dataset indices each data-parallel rank reads, epoch
// after epoch, with the semantics of PyTorch's torch.utils.data.DistributedSampler.
//
// Per epoch, the index list 0..size-1 is shuffled with a permutation drawn from
// a generator seeded with seed + epoch (identical on every rank, different per
// epoch), then either truncated to a multiple of num_replicas (drop_last) or
// padded to one by wrapping around to its start. Rank r takes every
// num_replicas-th index starting at r: the shards are disjoint, their union is the
// whole dataset (without drop_last), and each has num_samples() indices.
//
// The sampler also tracks how far this rank has read into the current epoch
// (position), so a resumed job continues exactly where it stopped: save state()
// in the checkpoint (per rank) and load_state() after restart.
//
// A plain value; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::data {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // false: pad by wrapping so every rank gets the same count
};

// What a resumed sampler needs: the epoch and the number of this rank's indices
// already handed out in it.
struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;
  // {"epoch": e, "position": p}
  std::string to_json() const;
  // ConfigError naming the problem when text is not such an object.
  static SamplerState from_json(const std::string& text);
  bool operator==(const SamplerState& o) const {
    return epoch == o.epoch && position == o.position;
  }
  // The same point of the epoch for `world` ranks, when `saved_world` ranks
  // saved this state. The sampler deals one global permutation round-robin, so
  // after p indices per rank at world w the job has consumed the first p * w
  // entries; `world` ranks consume the same entries after p * w / world each.
  // Exact within an epoch (the padding at an epoch's end depends on the world
  // size). ConfigError when p * w is not a multiple of world.
  SamplerState resharded(int saved_world, int world) const;
};

class DistributedSampler {
 public:
  // ConfigError if dataset_size < 0, num_replicas < 1, rank outside
  // [0, num_replicas), or drop_last leaves no sample (dataset_size < num_replicas).
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                     DistributedSamplerOptions options = {});

  // Starts epoch `epoch` (any value >= 0) from its beginning: position 0.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // Indices this rank gets per epoch, and all ranks together.
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int64_t dataset_size() const { return dataset_size_; }
  // The ranks the indices are dealt to (what a saved state's position counts in).
  int num_replicas() const { return num_replicas_; }

  // This rank's indices for the current epoch, in order (independent of position).
  const std::vector<int64_t>& indices() const { return indices_; }

  // The next up-to-batch_size indices of this epoch, advancing position; fewer
  // at the end of the epoch and empty once it is exhausted (call set_epoch next).
  std::vector<int64_t> next_batch(int64_t batch_size);
  // Indices left in this epoch.
  int64_t remaining() const { return num_samples_ - position_; }
  int64_t position() const { return position_; }

  SamplerState state() const { return {epoch_, position_}; }
  // Restores epoch and position; ConfigError if position > num_samples().
  void load_state(const SamplerState& state);

 private:
  void build_indices();

  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  DistributedSamplerOptions options_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> indices_;
};

}  // namespace tessera::data
