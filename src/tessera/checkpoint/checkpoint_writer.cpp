#include "tessera/checkpoint/checkpoint_writer.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/crc32c.h"
#include "tessera/checkpoint/model_export.h"
#include "tessera/checkpoint/tensor_file.h"
#include "tessera/core/atomic_file.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"
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

// TESSERA_TEST_KILL_IN_CHECKPOINT=R:S, a test hook: rank R SIGKILLs itself in
// the save of step S once its own files are written and before the commit (on
// the launcher's first attempt only), as a crash in the middle of a save would.
void maybe_kill_in_checkpoint(int rank, int64_t step) {
  const auto v = env::get("TESSERA_TEST_KILL_IN_CHECKPOINT");
  if (!v) return;
  const auto colon = v->find(':');
  TS_CHECK_T(ConfigError, colon != std::string::npos,
             "TESSERA_TEST_KILL_IN_CHECKPOINT='", *v, "': use RANK:STEP, e.g. 0:20");
  if (env::get("TORCHELASTIC_RESTART_COUNT").value_or("0") != "0") return;
  if (std::atoi(v->c_str()) == rank && std::atoll(v->c_str() + colon + 1) == step) {
    std::fprintf(stderr, "test hook: rank %d killed in the save of step %lld\n", rank,
                 static_cast<long long>(step));
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
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

void CheckpointWriter::check_directory_is_shared() {
  if (directory_checked_ || coordinator_->size() == 1) return;
  const int rank = coordinator_->rank();
  // A fresh name each time: no host can hold a stale lookup of it.
  std::string probe_error;
  std::string token;
  if (rank == 0) {
    token = c10::str(std::random_device{}(), "-", ::getpid());
    const std::string probe = dir_ + "/.tessera_shared_check_" + token;
    try {
      std::error_code ec;
      fs::create_directories(dir_, ec);
      TS_CHECK_T(CheckpointError, !ec, "cannot create checkpoint directory ", dir_, ": ",
                 ec.message());
      write_file_atomic(probe, token, options_.fsync);
    } catch (const std::exception& e) {
      probe_error = e.what();
    }
  }
  auto first = coordinator_->all_gather(rank == 0 ? (probe_error.empty() ? "ok " + token
                                                                         : "error " + probe_error)
                                                  : std::string());
  TS_CHECK_T(CheckpointError, first[0].rfind("ok ", 0) == 0, "no checkpoint saved: rank 0 could "
             "not write to ", dir_, ": ", first[0].substr(6));
  token = first[0].substr(3);
  const std::string probe = dir_ + "/.tessera_shared_check_" + token;
  // A shared filesystem may show a new file to other hosts a moment late.
  bool seen = false;
  for (int attempt = 0; attempt < 20 && !seen; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    try {
      seen = read_file_bytes(probe) == token;
    } catch (const CheckpointError&) {
      // Not there (yet): this host does not see rank 0's directory.
    }
  }
  auto views = coordinator_->all_gather((seen ? "1" : "0") + env::host_label());
  if (rank == 0) {
    std::error_code ec;
    fs::remove(probe, ec);
  }
  std::string blind;
  for (size_t r = 0; r < views.size(); ++r) {
    if (views[r][0] == '0') blind += c10::str(blind.empty() ? "" : ", ", "rank ", r, " on ",
                                              views[r].substr(1));
  }
  TS_CHECK_T(CheckpointError, blind.empty(), "the checkpoint directory ", dir_,
             " is not shared between the job's hosts: ", blind,
             " cannot see the file rank 0 on ", views[0].substr(1),
             " wrote there, so no host would hold a whole checkpoint. Put it on a filesystem every "
             "host mounts at the same path (NFS, Lustre, a cluster volume); nothing was saved");
  directory_checked_ = true;
}

void CheckpointWriter::export_model(const std::string& sdir, int64_t step) {
  std::string error;
  if (coordinator_->rank() == 0) {
    try {
      export_model_safetensors(sdir, options_.export_model_prefix, *options_.export_model_dtype);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  auto outcome = coordinator_->all_gather(error);
  TS_CHECK_T(CheckpointError, outcome[0].empty(), "checkpoint step ", step, " is committed, "
             "but rank 0 could not write its whole model (", kModelExportName, "): ", outcome[0]);
}

std::string CheckpointWriter::save(int64_t step, const CheckpointState& state) {
  TS_CHECK(step >= 0, "checkpoint step must be >= 0, got ", step);
  check_directory_is_shared();
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
  std::string report = write_rank_files(sdir, rank, state, options_.fsync);
  maybe_kill_in_checkpoint(rank, step);
  auto reports = coordinator_->all_gather(report);
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
  if (options_.export_model_dtype) export_model(sdir, step);
  return sdir;
}

}  // namespace tessera::checkpoint
