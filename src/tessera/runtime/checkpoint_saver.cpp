#include "tessera/runtime/checkpoint_saver.h"

#include <utility>

#include "tessera/checkpoint/group_coordinator.h"
#include "tessera/core/check.h"
#include "tessera/core/timer.h"

namespace tessera::runtime {

CheckpointSaver::CheckpointSaver(std::shared_ptr<comm::ProcessGroup> group)
    : group_(std::move(group)) {
  TS_CHECK(group_ != nullptr, "CheckpointSaver needs the training group");
}

std::string CheckpointSaver::save(const std::string& dir, int64_t step,
                                  const checkpoint::CheckpointState& state, int keep_last) {
  wait();
  checkpoint::CheckpointWriterOptions options;
  options.keep_last = keep_last;
  checkpoint::CheckpointWriter writer(dir, checkpoint::make_group_coordinator(group_), options);
  return writer.save(step, state);
}

checkpoint::AsyncSaveTimes CheckpointSaver::save_async(const std::string& dir, int64_t step,
                                                       const checkpoint::CheckpointState& state,
                                                       int keep_last, checkpoint::AsyncMode mode) {
  if (mode == checkpoint::AsyncMode::kDisabled) {
    Stopwatch clock;
    save(dir, step, state, keep_last);
    checkpoint::AsyncSaveTimes times;
    times.snapshot_seconds = clock.seconds();
    return times;
  }
  if (!async_ || async_->dir() != dir || async_->mode() != mode || keep_last_ != keep_last) {
    wait();  // the old writer's save commits before another writer starts
    // The background thread's own connection: its blocking reads must not
    // queue behind the training thread's store calls on a shared socket.
    std::shared_ptr<comm::Store> store = group_->store()->clone_connection();
    if (!store) store = group_->store();  // an in-process store: already thread-safe
    store->set_timeout(group_->timeout());
    auto coordinator = std::make_shared<checkpoint::StoreCoordinator>(
        store, group_->rank(), group_->size(),
        "async_checkpoint/" + std::to_string(writers_made_++));
    checkpoint::CheckpointWriterOptions options;
    options.keep_last = keep_last;
    async_.reset();
    async_ = std::make_unique<checkpoint::AsyncCheckpointWriter>(dir, std::move(coordinator),
                                                                 options, mode);
    keep_last_ = keep_last;
  }
  return async_->save(step, state);
}

std::optional<checkpoint::CompletedSave> CheckpointSaver::wait() {
  if (!async_) return std::nullopt;
  return async_->wait();
}

}  // namespace tessera::runtime
