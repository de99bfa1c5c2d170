// ParamStore: the ShardStore (zero/shard_store.h) of offload_param.device nvme.
// Stage-3 units' parameter shards live in their swap files; a unit's gather
// reads its shard into one of buffer_count buffers (offload_param.buffer_count,
// each offload_param.buffer_size elements) and frees the buffer when the
// all-gather is done. prefetch() starts reads early so that they overlap the
// computation of the units before.
//
// The optimizer step rewrites the files, so it calls drop_prefetched() first:
// a shard read before the step would be stale after it.
// Not thread-safe; the training thread calls everything.
#pragma once

#include <vector>

#include "tessera/runtime/offload/aligned_buffer.h"
#include "tessera/runtime/offload/async_io.h"
#include "tessera/runtime/offload/unit_swap_files.h"
#include "tessera/runtime/zero/shard_store.h"

namespace tessera::runtime::offload {

class ParamStore : public zero::ShardStore {
 public:
  // units: indexed like ZeroDataParallel::units(); those with a param file are
  // served. Each buffer holds buffer_numel elements of the largest dtype.
  ParamStore(AsyncIo& io, std::vector<UnitSwapFiles>& units, int buffer_count,
             int64_t buffer_numel);

  void prefetch(size_t unit) override;
  at::Tensor acquire(size_t unit) override;
  void release(size_t unit) override;
  // Waits for reads in flight and forgets every shard read but not in use.
  void drop_prefetched();

  int64_t buffer_bytes() const;

 private:
  enum class State { kOnDisk, kReading, kInUse };
  struct Entry {
    State state = State::kOnDisk;
    int slot = -1;
    AsyncIo::Ticket ticket = 0;
  };
  int free_slot() const;
  void start_read(size_t unit, int slot);
  // Frees a slot held by a prefetch that nobody uses yet; -1 if there is none.
  int evict_prefetched();

  AsyncIo& io_;
  std::vector<UnitSwapFiles>& units_;
  std::vector<AlignedBuffer> buffers_;
  std::vector<bool> slot_used_;
  std::vector<Entry> entries_;
};

}  // namespace tessera::runtime::offload
