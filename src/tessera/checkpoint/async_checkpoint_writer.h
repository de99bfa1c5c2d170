// AsyncCheckpointWriter: a checkpoint save that blocks training only for the
// time it takes to copy the state into host memory.
//
// save() copies every tensor of a CheckpointState into host buffers (the
// snapshot), starts a background thread and returns; the thread runs the
// ordinary CheckpointWriter commit protocol (checkpoint_writer.h) on the
// snapshot: every rank writes and fsyncs its files, rank 0 writes manifest.json
// and then `latest`, then prunes steps beyond keep_last. So a checkpoint becomes
// the latest only once every rank's files are durable, and a crash at any point
// of the background write leaves the previous checkpoint the latest, intact.
//
// Because the training thread goes on with its own collectives while the
// background thread commits, the background coordinator must be one nobody else
// uses: a StoreCoordinator over its own store connection
// (runtime/checkpoint_saver.h makes one from the training group), never the
// training group's collectives.
//
// At most one save is in flight: save() first waits for the previous one. A
// failure in the background (a full disk, a rank that died, a lost store) is
// thrown as a CheckpointError naming the step, the directory and the cause from
// the next save() or wait(), once; the destructor waits for the save in flight
// and logs a failure it can no longer throw. Training should call wait() before
// its last save and before exiting, so that the final checkpoint is synchronous.
//
// The background thread runs at a lower CPU priority (nice +10) so that the
// training threads keep their cores while it checksums and writes.
//
// Every rank of the coordinator calls save() with the same steps in the same
// order. One training thread owns an instance.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tessera/checkpoint/async_mode.h"
#include "tessera/checkpoint/checkpoint_writer.h"
#include "tessera/checkpoint/coordinator.h"

namespace tessera::checkpoint {

// What one save cost the training thread.
struct AsyncSaveTimes {
  double wait_seconds = 0;      // waiting for the previous save to finish
  double snapshot_seconds = 0;  // copying the state into host buffers
  double blocking_seconds() const { return wait_seconds + snapshot_seconds; }
};

// A save the background thread has committed.
struct CompletedSave {
  int64_t step = -1;
  std::string step_dir;
  double write_seconds = 0;  // from the start of the background write to the commit
};

class AsyncCheckpointWriter {
 public:
  // mode: kAsync or kAsyncWithPinnedMem (ConfigError for kDisabled: use
  // CheckpointWriter). `background` is used only by the background thread.
  AsyncCheckpointWriter(std::string dir, std::shared_ptr<Coordinator> background,
                        CheckpointWriterOptions options, AsyncMode mode);
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // Waits for the save in flight (throwing its failure), snapshots `state` and
  // starts writing it as step `step`. The caller may change the state's tensors
  // as soon as this returns.
  AsyncSaveTimes save(int64_t step, const CheckpointState& state);

  // Blocks until the save in flight is committed and returns it; nullopt when
  // none was in flight. CheckpointError if it failed (reported once).
  std::optional<CompletedSave> wait();

  // Whether a save was started and has not been waited for.
  bool in_flight() const { return worker_.joinable(); }
  // Whether the save in flight has finished (so wait() will not block).
  bool finished() const { return finished_.load(std::memory_order_acquire); }

  const std::string& dir() const { return writer_.dir(); }
  AsyncMode mode() const { return mode_; }
  // Bytes of host memory the snapshot buffers hold (kept between saves in
  // async_with_pinned_mem, released after each write in async).
  int64_t buffer_bytes() const;

 private:
  // Copies `t` into the next host buffer (reused in async_with_pinned_mem).
  at::Tensor stage(const at::Tensor& t, size_t& slot);
  void run(int64_t step);  // the background thread's body

  CheckpointWriter writer_;
  AsyncMode mode_;
  std::vector<at::Tensor> buffers_;  // reused host buffers, in snapshot order
  CheckpointState snapshot_;         // read only by the background thread while in flight
  std::thread worker_;
  std::atomic<bool> finished_{false};
  // Written by the background thread, read after join().
  std::exception_ptr error_;
  CompletedSave completed_;
};

}  // namespace tessera::checkpoint
