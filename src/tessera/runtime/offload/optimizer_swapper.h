// OptimizerSwapper: the optimizer step of a ZeRO rank whose optimizer state lives
// on disk (offload_optimizer.device nvme), streamed through a few buffers.
//
// Each unit's shard is cut into pieces of piece_numel elements. For every piece,
// in unit order: its state fields (and, with offload_param, its parameter values)
// are read from the swap files into a free buffer, the engine's own optimizer
// steps that piece alone (its state handed over as views of the buffer, its
// parameter and gradient as aliases of the piece), and the buffer is written
// back. With buffer_count buffers, reads run up to buffer_count - 2 pieces ahead
// of the update and one write stays in flight behind it (DeepSpeed's
// pipeline_read / pipeline_write), so the disk and the update overlap.
//
// The optimizer's updates are elementwise, so stepping a shard piece by piece
// gives bit for bit what one step over the whole shard gives (tests check it).
// Each piece is stepped in eight chunks, so the temporaries the optimizer makes
// (Adam's denominator) are an eighth of a piece.
// Memory: buffer_count buffers of (fields [+ 1 with offload_param]) pieces, and
// nothing else that lasts.
// Not thread-safe; the training thread calls step().
#pragma once

#include <torch/optim/optimizer.h>

#include <vector>

#include "tessera/runtime/offload/aligned_buffer.h"
#include "tessera/runtime/offload/async_io.h"
#include "tessera/runtime/offload/unit_swap_files.h"
#include "tessera/runtime/zero/flat_unit.h"

namespace tessera::runtime::offload {

class OptimizerSwapper {
 public:
  // units[i] belongs to flat_units[i]; piece_numel elements per piece (its bytes
  // a multiple of kIoAlignment); buffer_count >= 1.
  OptimizerSwapper(AsyncIo& io, std::vector<UnitSwapFiles>& units,
                   std::vector<zero::FlatUnit*> flat_units, int64_t piece_numel,
                   int buffer_count);

  // One optimizer step over every unit's shard. `optimizer` is the engine's,
  // whose parameter group g holds the shards of the units with group g; its
  // groups are restored when this returns or throws.
  void step(torch::optim::Optimizer& optimizer);

  // Bytes of the buffers (all of this swapper's lasting memory).
  int64_t buffer_bytes() const;
  int64_t piece_numel() const { return piece_numel_; }

 private:
  struct Piece {
    size_t unit = 0;
    int64_t begin = 0;  // element offset in the shard
    int64_t numel = 0;
  };
  struct Slot {
    AlignedBuffer buffer;
    std::vector<AsyncIo::Ticket> reads;
    std::vector<AsyncIo::Ticket> writes;
  };
  void load(size_t piece);     // waits for its slot's writes, starts the reads
  void update(size_t piece, torch::optim::Optimizer& optimizer);
  void store(size_t piece);    // starts the writes
  // Starts reading or writing the piece's parameter values (if offloaded) and,
  // with `fields`, its state fields, between the files and its slot.
  void transfer(size_t piece, bool write, bool fields, std::vector<AsyncIo::Ticket>& tickets);
  void wait(std::vector<AsyncIo::Ticket>& tickets);
  // The region of slot memory that holds field k of a piece, or (k ==
  // param_region_) its parameter values.
  at::Tensor region(Slot& slot, size_t k, const Piece& p) const;
  int64_t region_bytes() const;

  AsyncIo& io_;
  std::vector<UnitSwapFiles>& units_;
  std::vector<zero::FlatUnit*> flat_units_;
  int64_t piece_numel_;
  std::vector<Piece> pieces_;
  std::vector<Slot> slots_;
  std::vector<int64_t> steps_after_;  // per unit: its step count once this step is done
  size_t max_fields_ = 0;
  size_t param_region_ = 0;  // == max_fields_; used when some unit offloads its parameters
  bool has_param_region_ = false;
};

}  // namespace tessera::runtime::offload
