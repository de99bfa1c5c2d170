// ShardStore: where stage-3 parameter shards live between uses when they are not
// kept in memory (ZeRO-Infinity's offload_param; runtime/offload implements it).
//
// A FlatUnit bound to a store (FlatUnit::bind_shard_store) holds no shard memory
// of its own: its gather asks the store for the shard and gives it back once the
// all-gather is done. The ZeRO engine calls prefetch() for the units it will
// gather next so that their reads overlap the current unit's computation.
// Units are named by their index in ZeroDataParallel::units().
// Thread safety: none; the training thread calls everything.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

namespace tessera::runtime::zero {

class ShardStore {
 public:
  virtual ~ShardStore() = default;
  // Starts reading unit's shard if a buffer is free; a hint, never blocks for long.
  virtual void prefetch(size_t unit) = 0;
  // The unit's shard values (shard_numel elements), valid until release(unit).
  // Blocks until they are read; throws Error if the read fails.
  virtual at::Tensor acquire(size_t unit) = 0;
  virtual void release(size_t unit) = 0;
};

}  // namespace tessera::runtime::zero
