// Engine::save_checkpoint / load_checkpoint over the checkpoint module
// (checkpoint_writer.h): one step directory per save, a manifest with checksums
// written last, `latest` replaced atomically.
//   replicated.tsr  rank 0: "model.<name>" parameters and buffers,
//                   "optim.<name>.<field>" optimizer state (optimizer_state.h)
//   rank_<r>.tsr    every rank: "rng.cpu", its CPU generator state
//   manifest        metadata: counters, optimizer and schedule types, client state
// Parameters are restored by copy into the existing tensors, so the DDP gradient
// buckets, the optimizer and any user references keep pointing at them.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/SequenceNumber.h>

#include <filesystem>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/checkpoint_writer.h"
#include "tessera/checkpoint/group_coordinator.h"
#include "tessera/checkpoint/module_state.h"
#include "tessera/core/check.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/engine.h"
#include "tessera/runtime/optimizer_state.h"

namespace tessera::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr int kFormatVersion = 2;
constexpr const char* kModelPrefix = "model.";
constexpr const char* kRngName = "rng.cpu";

at::Tensor rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const at::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The step directory to load: `dir` itself when it holds a manifest, else the
// newest verified step under it.
std::string resolve_step_dir(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "manifest.json")) return dir;
  TS_CHECK_T(CheckpointError, fs::is_directory(dir), "checkpoint directory '", dir,
             "' does not exist");
  auto latest = checkpoint::latest_checkpoint(dir);
  TS_CHECK_T(CheckpointError, latest.has_value(), "no complete checkpoint in '", dir,
             "' (no step directory with a valid manifest); start without resuming");
  return *latest;
}

}  // namespace

std::string Engine::save_checkpoint(const std::string& dir, const json& client_state,
                                    int keep_last) {
  checkpoint::CheckpointState state;
  if (group_->rank() == 0) {
    state.replicated = checkpoint::module_state(module(), kModelPrefix);
    auto opt = optimizer_state(*optimizer_, trainable_);
    state.replicated.insert(state.replicated.end(), opt.begin(), opt.end());
  }
  state.per_rank.emplace_back(kRngName, rng_state());
  state.metadata = {{"format", kFormatVersion},
                    {"global_steps", global_steps_},
                    {"micro_steps", micro_steps_},
                    {"world_size", group_->size()},
                    {"optimizer", optimizer_type_name(*optimizer_)},
                    {"scheduler", config_.scheduler.type},
                    {"client_state", client_state}};
  checkpoint::CheckpointWriterOptions options;
  options.keep_last = keep_last;
  checkpoint::CheckpointWriter writer(dir, checkpoint::make_group_coordinator(group_), options);
  return writer.save(global_steps_, state);
}

json Engine::load_checkpoint(const std::string& dir) {
  auto coordinator = checkpoint::make_group_coordinator(group_);
  // Rank 0 picks the step, so every rank loads the same one even if a save by
  // another job lands in between.
  std::string chosen;
  std::string error;
  try {
    if (group_->rank() == 0) chosen = resolve_step_dir(dir);
  } catch (const CheckpointError& e) {
    error = e.what_without_backtrace();
  }
  chosen = coordinator->all_gather(error.empty() ? "ok:" + chosen : "error:" + error)[0];
  if (chosen.rfind("error:", 0) == 0) throw CheckpointError(chosen.substr(6));
  chosen = chosen.substr(3);

  // Phase 1, on every rank: verify checksums, read, check every name and shape.
  // Nothing is changed yet, so a failure on any rank leaves every engine intact.
  json metadata;
  checkpoint::NamedTensors replicated;
  StagedOptimizerState staged_optimizer;
  at::Tensor rng;
  try {
    auto reader = checkpoint::CheckpointReader::open(chosen);
    metadata = reader.metadata();
    TS_CHECK_T(CheckpointError, metadata.value("format", 0) == kFormatVersion, "checkpoint '",
               chosen, "' has format ", metadata.value("format", 0), ", this build reads ",
               kFormatVersion);
    const std::string saved_opt = metadata.value("optimizer", "");
    const std::string our_opt = optimizer_type_name(*optimizer_);
    TS_CHECK_T(CheckpointError, saved_opt == our_opt, "checkpoint '", chosen,
               "' holds state of optimizer ", saved_opt, " but this engine's optimizer is ",
               our_opt, "; use the optimizer it was trained with");
    replicated = reader.replicated();
    checkpoint::check_module_state(module(), replicated, kModelPrefix);
    staged_optimizer = stage_optimizer_state(*optimizer_, trainable_, replicated);
    const int rank = group_->rank();
    if (rank < reader.world_size()) {
      rng = checkpoint::find_tensor(reader.per_rank(rank), kRngName);
    } else {
      TS_LOG(WARN) << "checkpoint " << chosen << " was saved by " << reader.world_size()
                   << " ranks; rank " << rank << " keeps its own RNG state";
    }
    error.clear();
  } catch (const Error& e) {
    error = e.what_without_backtrace();
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  }
  auto reports = coordinator->all_gather(error);
  std::string failed;
  for (size_t r = 0; r < reports.size(); ++r) {
    if (!reports[r].empty()) failed += "\n  rank " + std::to_string(r) + ": " + reports[r];
  }
  TS_CHECK_T(CheckpointError, failed.empty(), "cannot load checkpoint '", chosen,
             "' (nothing was changed):", failed);
  // Phase 2: copy in place; only the checks above could fail.
  checkpoint::load_module_state(module(), replicated, kModelPrefix);
  install_optimizer_state(*optimizer_, std::move(staged_optimizer));
  if (rng.defined()) set_rng_state(rng);
  global_steps_ = metadata.value("global_steps", int64_t{0});
  micro_steps_ = metadata.value("micro_steps", int64_t{0});
  step_pending_ = false;
  first_node_after_step_ = at::sequence_number::peek();
  apply_schedule();
  return metadata.value("client_state", json::object());
}

}  // namespace tessera::runtime
