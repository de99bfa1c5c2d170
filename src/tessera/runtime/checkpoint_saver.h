// CheckpointSaver: how an engine writes its checkpoints, synchronously or in the
// background (checkpoint.async_mode, checkpoint/async_mode.h). The data-parallel
// Engine and the ModelParallelEngine each own one; they build the state, the
// saver writes it.
//
// A synchronous save commits over the training group's collectives
// (make_group_coordinator) and returns once the step is the latest. An
// asynchronous one snapshots the state into host buffers and commits in a
// background thread (checkpoint/async_checkpoint_writer.h) whose coordinator
// is a StoreCoordinator over its own connection to the group's key space in
// the job's store, so it never interleaves with the training thread's
// collectives. A synchronous save and load_checkpoint first wait for an
// asynchronous save in flight.
//
// Collective: every rank of the group calls the same saves in the same order.
// Owned by the engine's training thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tessera/checkpoint/async_checkpoint_writer.h"
#include "tessera/checkpoint/checkpoint_writer.h"
#include "tessera/comm/process_group.h"
#include "tessera/runtime/config.h"

namespace tessera::runtime {

// How the engines name the tensors of their checkpoints:
// "model.<parameter or buffer>" and "optim.<parameter>.<state field>", the same
// names whatever the layout or ZeRO stage.
inline constexpr const char* kCheckpointModelPrefix = "model.";
inline constexpr const char* kCheckpointOptimPrefix = "optim.";

// What zero_optimization.gather_16bit_weights_on_model_save asks each save to
// export (checkpoint/model_export.h): the training's 16-bit dtype, float32 when
// it trains in float32; nullopt when the key is off.
std::optional<at::ScalarType> model_export_dtype(const Config& config);

class CheckpointSaver {
 public:
  // export_model_dtype: also write step_<N>/model.safetensors at each save
  // (CheckpointWriterOptions::export_model_dtype).
  explicit CheckpointSaver(std::shared_ptr<comm::ProcessGroup> group,
                           std::optional<at::ScalarType> export_model_dtype = std::nullopt);

  // Waits for a save in flight (throwing its failure), then saves `state` as
  // `step` and returns the committed step directory. CheckpointError on every
  // rank if any rank failed.
  std::string save(const std::string& dir, int64_t step, const checkpoint::CheckpointState& state,
                   int keep_last);

  // mode kDisabled: save() above, its whole duration reported as blocking.
  // Otherwise: the asynchronous save of checkpoint/async_checkpoint_writer.h,
  // returning what it blocked; the failure of the previous save is thrown here.
  checkpoint::AsyncSaveTimes save_async(const std::string& dir, int64_t step,
                                        const checkpoint::CheckpointState& state, int keep_last,
                                        checkpoint::AsyncMode mode);

  // Blocks until the save in flight is committed; nullopt when none was.
  // CheckpointError if it failed.
  std::optional<checkpoint::CompletedSave> wait();
  bool in_flight() const { return async_ && async_->in_flight(); }
  // Whether a save in flight has finished writing (wait() would not block).
  bool finished() const { return !async_ || !async_->in_flight() || async_->finished(); }

 private:
  checkpoint::CheckpointWriterOptions options(int keep_last) const;

  std::shared_ptr<comm::ProcessGroup> group_;
  std::optional<at::ScalarType> export_model_dtype_;
  std::unique_ptr<checkpoint::AsyncCheckpointWriter> async_;
  int keep_last_ = 0;
  // Asynchronous writers made so far; the same count on every rank, so each
  // writer's store keys are its own.
  int64_t writers_made_ = 0;
};

}  // namespace tessera::runtime
