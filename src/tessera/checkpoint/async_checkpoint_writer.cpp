#include "tessera/checkpoint/async_checkpoint_writer.h"

#include <ATen/ATen.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

#include "tessera/core/check.h"
#include "tessera/core/logging.h"
#include "tessera/core/timer.h"

namespace tessera::checkpoint {

namespace {

// The background thread yields the CPU to training: on Linux a nice value set
// with the thread's id applies to that thread alone.
void lower_this_thread_priority() {
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  if (::setpriority(PRIO_PROCESS, tid, 10) != 0) {
    TS_LOG(DEBUG) << "checkpoint writer thread keeps its priority (setpriority failed)";
  }
}

}  // namespace

AsyncCheckpointWriter::AsyncCheckpointWriter(std::string dir, std::shared_ptr<Coordinator> background,
                                             CheckpointWriterOptions options, AsyncMode mode)
    : writer_(std::move(dir), std::move(background), options), mode_(mode) {
  TS_CHECK_T(ConfigError, mode_ != AsyncMode::kDisabled,
             "AsyncCheckpointWriter needs async_mode async or async_with_pinned_mem; with disabled "
             "save through CheckpointWriter");
}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    TS_LOG(ERROR) << e.what();
  }
}

at::Tensor AsyncCheckpointWriter::stage(const at::Tensor& t, size_t& slot) {
  const at::Tensor src = t.detach();
  at::Tensor buffer;
  if (mode_ == AsyncMode::kAsyncWithPinnedMem && slot < buffers_.size() &&
      buffers_[slot].sizes() == src.sizes() && buffers_[slot].scalar_type() == src.scalar_type()) {
    buffer = buffers_[slot];
  } else {
    // Page-locked host memory only helps (and only exists) with a CUDA device.
    const bool pin = mode_ == AsyncMode::kAsyncWithPinnedMem && at::hasCUDA();
    buffer = at::empty(src.sizes(), src.options().device(at::kCPU).pinned_memory(pin));
    if (mode_ == AsyncMode::kAsyncWithPinnedMem) {
      if (slot < buffers_.size()) {
        buffers_[slot] = buffer;
      } else {
        buffers_.push_back(buffer);
      }
    }
  }
  buffer.copy_(src);
  ++slot;
  return buffer;
}

AsyncSaveTimes AsyncCheckpointWriter::save(int64_t step, const CheckpointState& state) {
  TS_CHECK(step >= 0, "checkpoint step must be >= 0, got ", step);
  AsyncSaveTimes times;
  Stopwatch clock;
  wait();
  times.wait_seconds = clock.seconds();
  clock.reset();

  CheckpointState snapshot;
  size_t slot = 0;
  for (const auto& [name, t] : state.replicated) snapshot.replicated.emplace_back(name, stage(t, slot));
  for (const auto& [name, t] : state.per_rank) snapshot.per_rank.emplace_back(name, stage(t, slot));
  for (const auto& piece : state.pieces) {
    snapshot.pieces.push_back({piece.name, stage(piece.data, slot), piece.full_shape,
                               piece.flat_offset});
  }
  if (mode_ == AsyncMode::kAsyncWithPinnedMem) buffers_.resize(slot);
  snapshot.metadata = state.metadata;
  snapshot.rank_metadata = state.rank_metadata;
  snapshot_ = std::move(snapshot);
  times.snapshot_seconds = clock.seconds();

  finished_.store(false, std::memory_order_release);
  error_ = nullptr;
  completed_ = CompletedSave{};
  worker_ = std::thread([this, step] { run(step); });
  return times;
}

void AsyncCheckpointWriter::run(int64_t step) {
  lower_this_thread_priority();
  Stopwatch clock;
  try {
    completed_.step_dir = writer_.save(step, snapshot_);
    completed_.step = step;
    completed_.write_seconds = clock.seconds();
  } catch (...) {
    error_ = std::current_exception();
  }
  // async keeps no buffers between saves; the snapshot's memory goes back now.
  snapshot_ = CheckpointState{};
  finished_.store(true, std::memory_order_release);
}

std::optional<CompletedSave> AsyncCheckpointWriter::wait() {
  if (!worker_.joinable()) return std::nullopt;
  worker_.join();
  if (error_) {
    std::exception_ptr error = std::exchange(error_, nullptr);
    try {
      std::rethrow_exception(error);
    } catch (const CheckpointError&) {
      throw;  // already names the step, the directory and the file
    } catch (const std::exception& e) {
      TS_THROW(CheckpointError, "the background save of a checkpoint to ", dir(),
               " failed: ", e.what(), "; the previous checkpoint is still the latest");
    }
  }
  return completed_;
}

int64_t AsyncCheckpointWriter::buffer_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : buffers_) bytes += static_cast<int64_t>(b.nbytes());
  return bytes;
}

}  // namespace tessera::checkpoint
