// ModelParallelEngine: trains a decoder-only language model — the GPT or the
// Llama, or any family described by a parallel::DecoderSpec — with tensor,
// pipeline and data parallelism together (3D), from the same config the
// data-parallel Engine reads plus Megatron's top-level keys
// (ModelParallelConfig, config.h).
//
//   auto cfg = tessera::Config::from_file("gpt_3d.json");   // tp 2, pp 2
//   ModelParallelEngine engine(gpt_config, cfg, tessera::default_group());
//   // or: ModelParallelEngine engine(llama_config, cfg, tessera::default_group());
//   auto [ids, targets] = next_batch(engine.data_parallel_rank());  // [accum * micro, T]
//   double loss = engine.train_step(ids, targets);           // one optimizer step
//
// The world is laid out by ProcessMesh (tp innermost, then dp, then pp). Each
// rank builds only its pipeline stage's blocks, split over its tensor-parallel
// group (DecoderPipelineStage: GptPipelineStage, LlamaPipelineStage), with the
// dense model's weights for the same seed. One
// train_step runs the configured schedule (pipeline_schedule; the micro-batches
// are the gradient_accumulation_steps), sums the tied embedding's gradient over
// the first and last stage, averages gradients over the data-parallel group,
// clips by the global L2 norm of every rank's gradients (tied and replicated
// parameters counted once), and steps the config's optimizer and LR schedule.
// With zero_optimization.stage 1 the optimizer state is sharded over the
// data-parallel group (ZeRO-1): each optimizer group's parameters live in one
// flat buffer (zero/flat_unit.h), gradients are reduce-scattered over dp, each
// rank steps its shard, and the updated shards are all-gathered.
// Every rank of a data-parallel replica passes the same batch (the replica's
// share of the global batch, read with data_parallel_rank()/size()).
//
// A mixture-of-experts GPT (model.num_experts) with expert_model_parallel_size
// ep splits each MoE layer's experts over blocks of ep data-parallel ranks
// (ProcessMesh::ep), tokens travelling by moe_token_dispatcher_type. Expert
// weights are averaged (and ZeRO-1 sharded) over the ranks holding the same
// experts (ProcessMesh::expert_dp), the rest over the replicas; the clipping
// norm and num_parameters count each expert once. The reported loss includes
// the routers' auxiliary losses, as the dense GPT's does. Checkpoints hold
// whole expert tensors, so they resume at any ep (and any other layout).
//
// Checkpoints use the universal format of the data-parallel Engine: the same
// names ("model.<dense name>", "optim.<dense name>.<field>"), each tensor saved
// as the pieces its tensor-parallel ranks hold in the dense tensor's flat order.
// So a checkpoint saved at tp2·pp2 loads into the data-parallel Engine at any
// world size, and an Engine checkpoint (any world size, ZeRO stage 0-3) loads
// here at any layout; `tessera ckpt consolidate` reads either.
//
// ConfigError on every rank, before any model is built (check_layout): tp * pp
// not dividing the world, more pipeline chunks than layers, heads / vocabulary /
// sequence not divisible by tp, a virtual_pipeline_model_parallel_size that does
// not divide the layers per stage, or micro-batches the interleaved schedule
// cannot run. ZeRO stages 2 and 3 and model dropout are not supported with
// model parallelism yet (ConfigError).
// bf16: build with GPTConfig::compute_dtype = at::kBFloat16; activations (and
// what the pipeline and tensor-parallel collectives carry) are then 16-bit,
// parameters, gradients and their data-parallel reduction float32. fp16 (loss
// scaling) is a ConfigError here.
//
// Ownership: owns the mesh's groups, the stage, the optimizer. One engine per
// rank, used from the thread that built it; train_step, evaluate and the
// checkpoint calls are collective over the world.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/models/gpt.h"
#include "tessera/models/llama.h"
#include "tessera/parallel/pipeline/decoder_pipeline_stage.h"
#include "tessera/parallel/pipeline/pipeline_executor.h"
#include "tessera/parallel/process_mesh.h"
#include "tessera/runtime/checkpoint_saver.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/engine.h"
#include "tessera/runtime/lr_schedules.h"
#include "tessera/runtime/named_params.h"
#include "tessera/runtime/observability.h"
#include "tessera/runtime/optimizer_state.h"
#include "tessera/runtime/zero/flat_unit.h"

namespace tessera::runtime {

class ModelParallelEngine {
 public:
  // Every check of the layout against the model and the world size, without
  // building or communicating anything; resolves the batch for the dp size.
  // ConfigError naming the numbers. Returns the data-parallel size.
  static int check_layout(const parallel::DecoderSpec& model, Config& config, int world);
  static int check_layout(const models::GPTConfig& model, Config& config, int world);
  static int check_layout(const models::LlamaConfig& model, Config& config, int world);

  // Collective over `world`: builds the mesh's groups, then this rank's stage.
  ModelParallelEngine(parallel::DecoderSpec model, Config config,
                      std::shared_ptr<comm::ProcessGroup> world);
  ModelParallelEngine(const models::GPTConfig& model, Config config,
                      std::shared_ptr<comm::ProcessGroup> world);
  ModelParallelEngine(const models::LlamaConfig& model, Config config,
                      std::shared_ptr<comm::ProcessGroup> world);

  // One optimizer step on this replica's batch, ids and targets int64
  // [gradient_accumulation_steps * micro, T]. Returns the mean loss over the
  // global batch (the same value on every rank).
  double train_step(const at::Tensor& ids, const at::Tensor& targets);
  // Mean loss of a batch [n * micro, T] without training (forward only, every
  // micro-batch through the pipeline in turn), averaged over the replicas; the
  // same value on every rank.
  double evaluate(const at::Tensor& ids, const at::Tensor& targets);

  // Collective. dir/step_<global_steps()> in the checkpoint layout (see above);
  // the writer's commit protocol (checkpoint_writer.h). Returns the step dir.
  std::string save_checkpoint(const std::string& dir,
                              const nlohmann::json& client_state = nlohmann::json::object(),
                              int keep_last = 0);
  // Collective. A checkpoint root (newest verified step) or one step directory,
  // saved by this engine at any layout or by the data-parallel Engine. Verified
  // and read on every rank before anything changes; CheckpointError on every
  // rank naming the problem otherwise. Returns the client state.
  nlohmann::json load_checkpoint(const std::string& dir);
  // Collective. The same checkpoint written in the background, and waiting for
  // it: Engine::save_checkpoint_async and Engine::wait_for_checkpoint.
  checkpoint::AsyncSaveTimes save_checkpoint_async(
      const std::string& dir, const nlohmann::json& client_state = nlohmann::json::object(),
      int keep_last = 0, checkpoint::AsyncMode mode = checkpoint::AsyncMode::kAsync);
  std::optional<checkpoint::CompletedSave> wait_for_checkpoint();

  int64_t global_steps() const { return global_steps_; }
  double lr() const;
  double last_grad_norm() const { return last_grad_norm_; }
  // The executor's timings and live activations of the last train_step.
  const parallel::PipelineStepResult& last_step() const { return last_; }

  const parallel::ProcessMesh& mesh() const { return mesh_; }
  int data_parallel_rank() const { return mesh_.coord().dp; }
  int data_parallel_size() const { return mesh_.topology().dp(); }
  // The ranks holding this rank's parameters (dp x cp): gradients are averaged
  // and ZeRO-1 shards over them. Without cp, the data-parallel rank and size.
  int replica_rank() const { return mesh_.replicas()->rank(); }
  int replica_count() const { return mesh_.replicas()->size(); }
  // Expert parallelism (MoE): the ranks splitting each layer's experts.
  int ep() const { return mesh_.ep() ? mesh_.ep()->size() : 1; }
  // Collective. MoE: tokens kept per expert per layer, [layers, experts] int64,
  // summed over every replica since the last call; undefined for a dense model.
  at::Tensor take_tokens_per_expert();
  parallel::DecoderPipelineStage& stage() { return *stage_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  // Parameters of the whole model, each counted once (the dense model's count).
  int64_t num_parameters() const { return num_parameters_; }
  MemoryStats memory_stats() const;
  comm::CommStats comm_stats() const { return mesh_.world()->comm_stats(); }
  const Config& config() const { return config_; }
  // The comms logger's table (every group of this rank); empty unless comms_logger is on.
  comm::CommSummary comm_summary() const { return observability_->comm_summary(); }
  // Timeline and comms logger (observability.h); the destructor closes the timeline.
  Observability& observability() { return *observability_; }

 private:
  // This rank's tokens of a [n, T] batch: its context-parallel chunks of every
  // sequence (context_parallel.h); the batch itself without cp.
  at::Tensor local_tokens(const at::Tensor& batch) const;
  void average_over_data_parallel();
  // Averages `grads` in place over `group`, in buckets of bucket_cap_mb.
  void average_in_buckets(std::vector<at::Tensor>& grads, comm::ProcessGroup& group);
  // An MoE expert tensor (DenseSlice::experts): held by 1/ep of the replicas.
  bool is_expert(const std::string& name) const;
  double clip_gradients();
  void optimizer_step();
  void apply_schedule();
  // Sum of `local` over the world.
  double world_sum(double local);
  // ZeRO-1: the optimizer's state of every parameter, whole (this rank's tp
  // slice), gathered over dp; without ZeRO the optimizer's own state.
  checkpoint::NamedTensors whole_optimizer_state();
  // ZeRO-1: this rank's shard of each unit's state from whole per-parameter state.
  StagedOptimizerState stage_sharded_state(const checkpoint::NamedTensors& whole);
  // What this rank contributes to a checkpoint of the current step (collective
  // over dp under ZeRO-1, over tp for column-sliced tensors).
  checkpoint::CheckpointState checkpoint_state(const nlohmann::json& client_state);

  // First, so destroyed last (after everything that communicates); set in the body.
  std::unique_ptr<Observability> observability_;
  Config config_;
  parallel::DecoderSpec model_;
  parallel::ProcessMesh mesh_;
  std::unique_ptr<parallel::DecoderPipelineStage> stage_;
  std::unique_ptr<parallel::PipelineExecutor> executor_;
  // ZeRO-1: one per optimizer group (two with experts: dense and expert
  // weights), each sharded over its group (replicas, or expert_dp).
  std::vector<std::unique_ptr<zero::FlatUnit>> units_;
  std::vector<std::shared_ptr<comm::ProcessGroup>> unit_groups_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  NamedParams params_;  // what the optimizer steps, dense names, in its order
  std::vector<double> group_lrs_;
  LrSchedule schedule_;
  parallel::PipelineStepResult last_;
  int64_t global_steps_ = 0;
  int64_t num_parameters_ = 0;
  double last_grad_norm_ = 0;
  // Last, so destroyed first: a save in flight commits while the groups are up.
  CheckpointSaver checkpoint_saver_{mesh_.world(), model_export_dtype(config_)};
};

}  // namespace tessera::runtime
