// NvmeOffload: ZeRO-Infinity's offload to disk for one rank of a ZeRO engine
// (zero_optimization.offload_optimizer / offload_param with device nvme).
//
//   offload_optimizer  the optimizer state of every unit's shard (Adam's moments,
//                      SGD's momentum) lives in swap files, and each optimizer
//                      step streams it through buffers (optimizer_swapper.h)
//   offload_param      (stage 3, with offload_optimizer) the stage-3 units'
//                      parameter shards, which are the optimizer's float32 master
//                      weights, live in swap files too; each unit's gather reads
//                      its shard, ahead of time (param_store.h)
//
// The files sit in one directory per rank under nvme_path (swap_space.h), are
// sized and the disk checked before training starts, and are removed when the
// engine is destroyed. Checkpoints see the state through read-only mappings of
// the files (nothing is copied into memory to save), and a loaded checkpoint is
// written to new files that replace the old ones only once every rank has
// verified what it read.
//
// Owned by the Engine. Not thread-safe; the training thread calls everything.
#pragma once

#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/checkpoint/checkpoint_writer.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/offload/optimizer_swapper.h"
#include "tessera/runtime/offload/param_store.h"
#include "tessera/runtime/offload/swap_space.h"
#include "tessera/runtime/offload/unit_swap_files.h"
#include "tessera/runtime/zero/zero_data_parallel.h"

namespace tessera::runtime::offload {

// What the offload holds and has moved, for memory_stats() and benchmarks.
struct OffloadStats {
  int64_t buffer_bytes = 0;   // host memory of the I/O buffers
  int64_t file_bytes = 0;     // disk space of the swap files
  int64_t read_bytes = 0;     // moved from disk so far
  int64_t written_bytes = 0;  // moved to disk so far
  std::string engine;         // "uring" or "posix"
};

class NvmeOffload {
 public:
  // Creates the swap files (after checking the disk: ConfigError if nvme_path is
  // missing, not writable or too small) and moves the current shards' values
  // (offload_param) there. `optimizer` is the engine's, built over zero's shards,
  // with no state yet. ConfigError for an optimizer whose state cannot be
  // swapped (param_state_fields) or a unit larger than offload_param.buffer_size.
  NvmeOffload(const Config& config, zero::ZeroDataParallel& zero,
              torch::optim::Optimizer& optimizer, int rank);
  ~NvmeOffload();
  NvmeOffload(const NvmeOffload&) = delete;
  NvmeOffload& operator=(const NvmeOffload&) = delete;

  // The optimizer step, streamed (replaces optimizer.step()).
  void step(torch::optim::Optimizer& optimizer);

  // --- checkpoints -----------------------------------------------------------
  // Unit u's shard values: a mapping of its swap file, or the shard itself.
  at::Tensor shard_values(size_t unit) const;
  // Unit u's optimizer state as optimizer_state() names it for one parameter
  // called `name` ("<name>.step", "<name>.exp_avg", ...; empty before the first
  // step), the tensors mapped from the swap files.
  checkpoint::NamedTensors state_fields(size_t unit, const std::string& name) const;
  // Phase 1 of a load: writes unit u's new shard values and state (named as
  // state_fields() names them; empty: no state) into new files beside the live
  // ones (shards kept in memory are held until the commit). Nothing the engine
  // uses changes. Errors (a wrong shape, a full disk)
  // leave the live files as they were.
  void stage(size_t unit, const at::Tensor& shard, const checkpoint::NamedTensors& fields,
             const std::string& name);
  // Phase 2: the staged files replace the live ones and the in-memory shards
  // take their values (every unit must have been staged). discard_staged() removes them instead.
  void commit_staged();
  void discard_staged();

  OffloadStats stats() const;
  bool params_offloaded() const { return param_store_ != nullptr; }

 private:
  struct Staged {
    std::unique_ptr<SwapFile> param;  // offloaded shards
    at::Tensor values;                // shards kept in memory
    std::vector<std::unique_ptr<SwapFile>> fields;
    bool has_state = false;
    int64_t step = 0;
  };
  SwapSpace& space_for(const std::string& nvme_path, int64_t reserve);

  zero::ZeroDataParallel& zero_;
  int rank_;
  AsyncIoOptions io_options_;
  std::map<std::string, std::unique_ptr<SwapSpace>> spaces_;  // by nvme_path
  SwapSpace* io_space_ = nullptr;     // the optimizer's: its engine moves everything
  SwapSpace* param_space_ = nullptr;  // offload_param's (may be the same)
  bool has_step_ = false;             // the optimizer counts steps (Adam, AdamW)
  std::vector<UnitSwapFiles> units_;
  std::unique_ptr<ParamStore> param_store_;
  std::unique_ptr<OptimizerSwapper> swapper_;
  std::vector<Staged> staged_;
};

}  // namespace tessera::runtime::offload
