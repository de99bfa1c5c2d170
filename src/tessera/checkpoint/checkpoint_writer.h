// CheckpointWriter: collective, crash-safe save of one training step.
//
// Layout under the checkpoint directory `dir`:
//   dir/step_<N>/replicated.tsr      state identical on every rank, written once by rank 0
//   dir/step_<N>/rank_<rrrrr>.tsr    each rank's own state (RNG, sampler, shards)
//   dir/step_<N>/manifest.json       written last (checkpoint_manifest.h)
//   dir/latest                       "step_<N>\n", replaced after the manifest
// (.tsr: tensor_file.h, a header plus raw tensor bytes; nothing executable.)
//
// Commit protocol, so a crash at any point leaves the previous checkpoint
// loadable and the new one either complete or visibly partial (no manifest):
//   1. rank 0 removes a stale manifest of step N (a retried save); barrier;
//   2. every rank writes its file(s) to a temp name, fsyncs, renames, fsyncs the
//      directory, and computes size and CRC-32C;
//   3. all_gather of the file entries (or of the error a rank hit: then every rank
//      throws a CheckpointError naming the failed ranks, and nothing is committed);
//   4. rank 0 writes manifest.json (temp + fsync + rename + fsync of the directory),
//      then `latest` (temp + fsync + rename + fsync), then prunes old steps
//      (keep_last);
//   5. all_gather of rank 0's outcome: save() returns on every rank only after the
//      commit, or throws on every rank if it failed;
//   6. with export_model_dtype, rank 0 writes the whole model beside the shards and
//      every rank learns whether it did (the step stays committed either way).
//
// Before its first save with more than one rank, the writer checks that every
// rank sees the directory rank 0 writes to: rank 0 writes a probe file there and
// each rank reads it back. A directory local to each host (no shared
// filesystem) would let rank 0 commit a manifest that lists files no single host
// holds; instead every rank throws a CheckpointError naming the ranks and hosts
// that cannot see it, and nothing is saved.
//
// Every rank calls save() with the same step, in the same collective order.
// Owned by one training thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/checkpoint/coordinator.h"
#include "tessera/checkpoint/tensor_file.h"

namespace tessera::checkpoint {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// What one rank contributes to a checkpoint. Tensors may live on any device and
// have any layout; they are copied to contiguous CPU memory for writing.
struct CheckpointState {
  // Identical on every rank (model weights and optimizer state under plain data
  // parallel). Only rank 0's copy is written; other ranks may leave it empty.
  NamedTensors replicated;
  // This rank's own state (RNG state, ...). May be empty.
  NamedTensors per_rank;
  // This rank's pieces of sharded tensors (ZeRO shards), written to its own file
  // after per_rank; a reader reassembles them across ranks (sharded_tensors.h).
  std::vector<TensorPiece> pieces;
  // Job-level JSON (config, step counters); rank 0's is stored.
  nlohmann::json metadata = nlohmann::json::object();
  // This rank's small JSON state (e.g. sampler state), stored in the manifest.
  nlohmann::json rank_metadata = nlohmann::json::object();
};

struct CheckpointWriterOptions {
  // Keep only the newest keep_last committed steps (0: keep all). Older step
  // directories are deleted by rank 0 after a successful commit.
  int keep_last = 0;
  // fsync files and directories (off only in tests that measure nothing durable).
  bool fsync = true;
  // After the commit, rank 0 also writes the whole model (the tensors named
  // export_model_prefix...) in this dtype to step_<N>/model.safetensors
  // (model_export.h). nullopt: not written.
  std::optional<at::ScalarType> export_model_dtype;
  std::string export_model_prefix = "model.";
};

class CheckpointWriter {
 public:
  // `dir` is created if missing. coordinator: LocalCoordinator for one process,
  // make_group_coordinator(group) or a StoreCoordinator for several.
  CheckpointWriter(std::string dir, std::shared_ptr<Coordinator> coordinator,
                   CheckpointWriterOptions options = {});

  // Collective. Saves `state` as step `step` (>= 0) and returns the step
  // directory once it is committed. Throws CheckpointError (on every rank) if any
  // rank failed to write, naming the rank, file and cause.
  std::string save(int64_t step, const CheckpointState& state);

  const std::string& dir() const { return dir_; }

 private:
  // Collective, once: the probe described above (CheckpointError when it fails).
  void check_directory_is_shared();
  // Step 6 above; CheckpointError on every rank when rank 0 failed.
  void export_model(const std::string& step_dir, int64_t step);

  std::string dir_;
  std::shared_ptr<Coordinator> coordinator_;
  CheckpointWriterOptions options_;
  bool directory_checked_ = false;
};

// "dir/step_<N>".
std::string step_dir(const std::string& dir, int64_t step);

}  // namespace tessera::checkpoint
