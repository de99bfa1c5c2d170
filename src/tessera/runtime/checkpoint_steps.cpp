#include "tessera/runtime/checkpoint_steps.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "tessera/core/check.h"

namespace tessera::runtime {

at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

at::Tensor saved_rng(const checkpoint::CheckpointReader& reader, int rank) {
  const checkpoint::FileEntry* f = reader.manifest().rank_file(rank);
  if (f != nullptr) {
    for (const auto& e : f->tensors) {
      if (e.name == kCheckpointRngName && !e.is_piece) return reader.read_tensor(*f, e);
    }
  }
  TS_THROW(CheckpointError, "checkpoint ", reader.path(), " has no tensor '", kCheckpointRngName,
           "' for rank ", rank);
}

std::string agree_on_step(const std::string& dir, checkpoint::Coordinator& coordinator) {
  // Rank 0 picks the step, so every rank loads the same one even if a save by
  // another job lands in between.
  std::string chosen;
  std::string error;
  try {
    if (coordinator.rank() == 0) chosen = checkpoint::resolve_step_dir(dir, "; start without resuming");
  } catch (const CheckpointError& e) {
    error = e.what_without_backtrace();
  }
  chosen = coordinator.all_gather(error.empty() ? "ok:" + chosen : "error:" + error)[0];
  if (chosen.rfind("error:", 0) == 0) throw CheckpointError(chosen.substr(6));
  return chosen.substr(3);
}

void check_checkpoint_metadata(const nlohmann::json& metadata, const std::string& step_dir,
                               const std::string& optimizer) {
  TS_CHECK_T(CheckpointError, metadata.value("format", 0) == kCheckpointFormatVersion,
             "checkpoint '", step_dir, "' has format ", metadata.value("format", 0),
             ", this build reads ", kCheckpointFormatVersion);
  const std::string saved = metadata.value("optimizer", "");
  TS_CHECK_T(CheckpointError, saved == optimizer, "checkpoint '", step_dir,
             "' holds state of optimizer ", saved, " but this engine's optimizer is ", optimizer,
             "; use the optimizer it was trained with");
}

void check_saved_shape(const checkpoint::CheckpointTensors& all, const std::string& tensor,
                       at::IntArrayRef model) {
  const auto& info = all.info(tensor);
  TS_CHECK_T(CheckpointError, at::IntArrayRef(info.shape) == model, "tensor '", tensor,
             "' has shape ", at::IntArrayRef(info.shape), " in the checkpoint but ", model,
             " in the model; check the model config");
}

void raise_if_any_failed(checkpoint::Coordinator& coordinator, const std::string& error,
                         const std::string& step_dir) {
  const auto reports = coordinator.all_gather(error);
  std::string failed;
  for (size_t r = 0; r < reports.size(); ++r) {
    if (!reports[r].empty()) failed += "\n  rank " + std::to_string(r) + ": " + reports[r];
  }
  TS_CHECK_T(CheckpointError, failed.empty(), "cannot load checkpoint '", step_dir,
             "' (nothing was changed):", failed);
}

}  // namespace tessera::runtime
