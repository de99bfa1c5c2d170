// TrainBackend: what `tessera train`'s loop (train_command.cpp) drives, one
// per rank: the data-parallel Engine (DDP or ZeRO), or, when the config asks for
// tensor or pipeline parallelism, the ModelParallelEngine. The loop itself —
// progress lines, metrics, evaluation and checkpoint intervals, resume — is the
// same for both.
//
// make_train_backend() joins the job (tessera::init) and builds the model; the
// layout checks that need no communication run before, in check_train_layout().
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tessera/checkpoint/async_checkpoint_writer.h"
#include "tessera/cli/commands/train_data.h"
#include "tessera/cli/commands/train_settings.h"
#include "tessera/comm/comm_stats.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/engine.h"

namespace tessera::cli {

// Which replica's data a rank reads: every rank of a tensor/pipeline group reads
// the same batch.
struct DataShard {
  int replicas = 1;  // data-parallel size
  int replica = 0;   // this rank's data-parallel rank
};

// Resolves the batch (for the data-parallel size) and checks the parallel
// layout against the model and the world: ConfigError before joining the job.
DataShard check_train_layout(runtime::Config& cfg, const TrainSettings& s, int world, int rank);

class TrainBackend {
 public:
  virtual ~TrainBackend() = default;
  // One optimizer step (gradient_accumulation_steps micro-batches from `data`).
  // Returns this rank's share of the step's loss: mean_over_job of it over the
  // ranks is the mean loss of the global batch.
  virtual double train_step(TrainData& data) = 0;
  // The mean over the job of every rank's `local` value from train_step (collective).
  virtual double mean_over_job(double local) = 0;
  // Whether `local` is true on any rank of the job (collective).
  virtual bool any_rank(bool local) = 0;
  // Held-out loss over `iters` micro-batches per replica (collective); -1 without held-out data.
  virtual double evaluate(TrainData& data, int64_t iters) = 0;
  // Collective: a checkpoint of this step, committed when it returns.
  virtual void save(const std::string& dir, const nlohmann::json& client_state, int keep_last) = 0;
  // Collective: a checkpoint of this step written in the background
  // (checkpoint.async_mode; Engine::save_checkpoint_async); mode kDisabled
  // saves synchronously and reports it all as blocking.
  virtual checkpoint::AsyncSaveTimes save_async(const std::string& dir,
                                                const nlohmann::json& client_state, int keep_last,
                                                checkpoint::AsyncMode mode) = 0;
  // Blocks until a background save in flight is committed (nullopt: none);
  // CheckpointError if it failed.
  virtual std::optional<checkpoint::CompletedSave> wait_for_checkpoint() = 0;
  virtual nlohmann::json load(const std::string& dir) = 0;
  // Rank 0 prints a text sample of `length` bytes after `prompt` (collective).
  virtual void sample(const std::string& prompt, int64_t length, uint64_t seed) = 0;

  virtual int64_t global_steps() const = 0;
  virtual double lr() const = 0;
  virtual double grad_norm() const = 0;
  virtual int64_t num_parameters() const = 0;
  // fp16 loss scaling (1 and 0 without it).
  virtual double loss_scale() const { return 1.0; }
  virtual int64_t skipped_steps() const { return 0; }
  // MoE models: tokens kept per expert per layer ([layer][expert]) over the
  // whole job since the last call; null without experts. Collective.
  virtual nlohmann::json take_tokens_per_expert() { return nullptr; }
  virtual runtime::MemoryStats memory_stats() const = 0;
  virtual comm::CommStats comm_stats() const = 0;
  // The engine's timeline and comms logger (runtime/observability.h).
  virtual runtime::Observability& observability() = 0;
  // "ZeRO stage 1", "tp2 x dp1 x pp2, 1f1b": for the startup and memory lines.
  virtual std::string describe() const = 0;
  virtual int rank() const = 0;
  virtual int world() const = 0;
};

// Joins the job and builds the backend the config asks for.
std::unique_ptr<TrainBackend> make_train_backend(const runtime::Config& cfg, const TrainSettings& s);

}  // namespace tessera::cli
