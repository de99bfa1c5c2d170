#include "tessera/checkpoint/checkpoint_writer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/crc32c.h"
#include "tessera/checkpoint/tensor_file.h"
#include "tessera/core/atomic_file.h"
#include "tessera/core/check.h"
#include "tessera/core/logging.h"

namespace tessera::checkpoint {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kReplicatedName = "replicated.tsr";

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank_%05d.tsr", rank);
  return buf;
}

FileEntry write_one(const std::string& dir, const std::string& name, int rank, FileKind kind,
                    const NamedTensors& tensors, const std::vector<TensorPiece>& pieces,
                    bool do_fsync) {
  WrittenFile w = write_tensor_file(dir + "/" + name, tensors, pieces, do_fsync);
  FileEntry e;
  e.path = name;
  e.rank = rank;
  e.kind = kind;
  e.size = w.size;
  e.crc32c = crc32c_hex(w.crc);
  e.tensors = std::move(w.tensors);
  return e;
}

// This rank's report for the all_gather: its file entries and rank metadata, or
// the error it hit.
std::string write_rank_files(const std::string& sdir, int rank, const CheckpointState& state,
                             bool do_fsync) {
  try {
    json files = json::array();
    if (rank == 0) {
      files.push_back(to_json(
          write_one(sdir, kReplicatedName, 0, FileKind::kReplicated, state.replicated, {}, do_fsync)));
    }
    if (!state.per_rank.empty() || !state.pieces.empty()) {
      files.push_back(to_json(write_one(sdir, rank_file_name(rank), rank, FileKind::kRank,
                                        state.per_rank, state.pieces, do_fsync)));
    }
    return json{{"ok", true}, {"files", files}, {"rank_metadata", state.rank_metadata}}.dump();
  } catch (const std::exception& e) {
    return json{{"ok", false}, {"error", e.what()}}.dump();
  }
}

// Deletes committed steps beyond the newest keep_last. Best effort: a failure is
// logged, never fatal, since the new checkpoint is already committed.
void prune(const std::string& dir, int keep_last) {
  if (keep_last <= 0) return;
  std::vector<int64_t> steps = list_steps(dir);
  if (static_cast<int>(steps.size()) <= keep_last) return;
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < steps.size(); ++i) {
    std::error_code ec;
    fs::remove_all(step_dir(dir, steps[i]), ec);
    if (ec) {
      TS_LOG(WARN) << "could not delete old checkpoint " << step_dir(dir, steps[i]) << ": "
                   << ec.message();
    }
  }
}

}  // namespace

std::string step_dir(const std::string& dir, int64_t step) {
  return dir + "/step_" + std::to_string(step);
}

CheckpointWriter::CheckpointWriter(std::string dir, std::shared_ptr<Coordinator> coordinator,
                                   CheckpointWriterOptions options)
    : dir_(std::move(dir)), coordinator_(std::move(coordinator)), options_(options) {
  TS_CHECK(coordinator_ != nullptr,
           "CheckpointWriter needs a coordinator (LocalCoordinator for "
           "one process)");
  TS_CHECK_T(ConfigError, !dir_.empty(), "checkpoint directory must not be empty");
}

std::string CheckpointWriter::save(int64_t step, const CheckpointState& state) {
  TS_CHECK(step >= 0, "checkpoint step must be >= 0, got ", step);
  const int rank = coordinator_->rank();
  const int world = coordinator_->size();
  const std::string sdir = step_dir(dir_, step);

  // 1. Rank 0 makes the directory and removes a stale manifest of a retried save,
  //    so the step cannot look complete while its files are being replaced.
  std::string prep_error;
  if (rank == 0) {
    try {
      std::error_code ec;
      fs::create_directories(sdir, ec);
      TS_CHECK_T(CheckpointError, !ec, "cannot create checkpoint directory ", sdir, ": ",
                 ec.message());
      if (fs::exists(sdir + "/" + kManifestName)) {
        fs::remove(sdir + "/" + kManifestName);
        if (options_.fsync) core::fsync_directory<CheckpointError>(sdir);
      }
      if (options_.fsync) core::fsync_directory<CheckpointError>(dir_);
    } catch (const std::exception& e) {
      prep_error = e.what();
    }
  }
  auto prep = coordinator_->all_gather(prep_error);
  TS_CHECK_T(CheckpointError, prep[0].empty(), "checkpoint step ", step,
             " not saved: rank 0 could not prepare ", sdir, ": ", prep[0]);

  // 2-3. Every rank writes and fsyncs its files, then all reports are exchanged.
  auto reports = coordinator_->all_gather(write_rank_files(sdir, rank, state, options_.fsync));
  CheckpointManifest manifest;
  manifest.step = step;
  manifest.world_size = world;
  manifest.metadata = state.metadata;
  std::string failures;
  for (int r = 0; r < world; ++r) {
    json rep = json::parse(reports[static_cast<size_t>(r)]);
    if (!rep.at("ok").get<bool>()) {
      failures += c10::str(" rank ", r, ": ", rep.at("error").get<std::string>(), ";");
      continue;
    }
    for (const auto& f : rep.at("files")) manifest.files.push_back(file_entry_from_json(f, sdir));
    manifest.rank_metadata.push_back(rep.at("rank_metadata"));
  }
  TS_CHECK_T(CheckpointError, failures.empty(), "checkpoint step ", step, " in ", sdir,
             " was not committed because writing failed on", failures,
             " the previous checkpoint is still the latest");

  // 4. Rank 0 commits: manifest, then `latest`, then pruning.
  std::string commit_error;
  if (rank == 0) {
    try {
      manifest.created_unix = std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
      write_file_atomic(sdir + "/" + kManifestName, manifest.to_json(), options_.fsync);
      write_file_atomic(dir_ + "/" + kLatestName, "step_" + std::to_string(step) + "\n",
                        options_.fsync);
      prune(dir_, options_.keep_last);
    } catch (const std::exception& e) {
      commit_error = e.what();
    }
  }
  // 5. Nobody returns before the commit, and a failed commit fails every rank.
  auto commit = coordinator_->all_gather(commit_error);
  TS_CHECK_T(CheckpointError, commit[0].empty(), "checkpoint step ", step,
             " was not committed by rank 0: ", commit[0]);
  if (rank == 0) {
    TS_LOG(INFO) << "checkpoint step " << step << " committed to " << sdir;
  }
  return sdir;
}

}  // namespace tessera::checkpoint
