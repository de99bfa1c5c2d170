#include "tessera/runtime/checkpoint_saver.h"

#include <utility>

#include "tessera/checkpoint/group_coordinator.h"
#include "tessera/core/check.h"
#include "tessera/core/timer.h"

namespace tessera::runtime {

std::optional<at::ScalarType> model_export_dtype(const Config& config) {
  if (!config.zero.gather_16bit_weights_on_model_save) return std::nullopt;
  const std::string& d = config.precision.dtype;
  return d == "bf16" ? at::kBFloat16 : d == "fp16" ? at::kHalf : at::kFloat;
}

CheckpointSaver::CheckpointSaver(std::shared_ptr<comm::ProcessGroup> group,
                                 std::optional<at::ScalarType> export_model_dtype)
    : group_(std::move(group)), export_model_dtype_(export_model_dtype) {
  TS_CHECK(group_ != nullptr, "CheckpointSaver needs the training group");
}

checkpoint::CheckpointWriterOptions CheckpointSaver::options(int keep_last) const {
  checkpoint::CheckpointWriterOptions options;
  options.keep_last = keep_last;
  options.export_model_dtype = export_model_dtype_;
  options.export_model_prefix = kCheckpointModelPrefix;
  return options;
}

std::string CheckpointSaver::save(const std::string& dir, int64_t step,
                                  const checkpoint::CheckpointState& state, int keep_last) {
  wait();
  checkpoint::CheckpointWriter writer(dir, checkpoint::make_group_coordinator(group_),
                                      options(keep_last));
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
    async_.reset();
    async_ = std::make_unique<checkpoint::AsyncCheckpointWriter>(dir, std::move(coordinator),
                                                                 options(keep_last), mode);
    keep_last_ = keep_last;
  }
  return async_->save(step, state);
}

std::optional<checkpoint::CompletedSave> CheckpointSaver::wait() {
  if (!async_) return std::nullopt;
  return async_->wait();
}

}  // namespace tessera::runtime
