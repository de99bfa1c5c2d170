// CheckpointReader: verified load of one committed checkpoint step.
//
// open() reads manifest.json and checks, before any tensor is handed out, that
// every file it lists exists, has the recorded size and the recorded CRC-32C, and
// that each file's own tensor index matches the manifest. Any failure is a
// CheckpointError naming the file and the problem (missing manifest = partial
// checkpoint, missing file, size mismatch = truncated, checksum mismatch =
// corrupted). Loading re-checks the checksum of the bytes it actually reads.
//
// latest_checkpoint(dir) resolves `dir/latest` and falls back to the newest step
// directory that verifies, so a crash during a save, or a damaged newest
// checkpoint, still resumes from the previous one.
//
// Verify::kIndex checks less up front, for a rank that will read only some
// tensors: every file must exist with its recorded size and its index must match
// the manifest; each tensor's bytes are then checked against the tensor's own
// CRC-32C when read_tensor() reads them.
//
// Reads are const; an instance may be shared by threads that only read.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/checkpoint/checkpoint_manifest.h"
#include "tessera/checkpoint/checkpoint_writer.h"

namespace tessera::checkpoint {

class CheckpointReader {
 public:
  enum class Verify { kFull, kIndex };
  // Opens and verifies the step directory (see above). CheckpointError.
  static CheckpointReader open(const std::string& step_dir, Verify verify = Verify::kFull);

  const CheckpointManifest& manifest() const { return manifest_; }
  const std::string& path() const { return step_dir_; }
  int64_t step() const { return manifest_.step; }
  int world_size() const { return manifest_.world_size; }
  const nlohmann::json& metadata() const { return manifest_.metadata; }
  // CheckpointError if rank is outside [0, world_size).
  const nlohmann::json& rank_metadata(int rank) const;

  // The replicated tensors (empty if none were saved), as CPU tensors.
  NamedTensors replicated() const;
  // Rank `rank`'s own tensors (empty if it saved none). CheckpointError if rank is
  // outside [0, world_size): a different world size needs resharding.
  NamedTensors per_rank(int rank) const;
  // One tensor (or piece) of `file`, checked against its CRC-32C; CheckpointError
  // naming the file and the tensor (see tensor_file.h read_tensor).
  at::Tensor read_tensor(const FileEntry& file, const TensorEntry& entry) const;

 private:
  CheckpointReader() = default;
  NamedTensors load_file(const FileEntry& file) const;

  std::string step_dir_;
  CheckpointManifest manifest_;
};

// The step directory `dir/latest` names if it verifies, else the newest
// step_<N> directory that verifies (logging why newer ones were skipped), else
// nullopt (no checkpoint yet). Never throws for a damaged checkpoint.
std::optional<std::string> latest_checkpoint(const std::string& dir);

// `dir` itself when it is a step directory (holds a manifest), else
// latest_checkpoint(dir). CheckpointError naming `dir` when it does not exist or
// holds no complete step, followed by `hint` when there is none (what to do).
std::string resolve_step_dir(const std::string& dir, const std::string& hint = "");

// Committed step numbers under dir (those with a manifest), ascending; unverified.
std::vector<int64_t> list_steps(const std::string& dir);

// Finds `name` in tensors; CheckpointError naming it when absent, followed by
// `hint` (what the caller needed it for, what to check).
const at::Tensor& find_tensor(const NamedTensors& tensors, const std::string& name,
                              const std::string& hint = "");

}  // namespace tessera::checkpoint
