// Engine: the DeepSpeed-style training loop driver for data-parallel training.
//
//   auto engine = tessera::initialize(model, tessera::Config::from_file("ds.json"));
//   for (...) {
//     auto loss = loss_fn(engine.forward(x), y);   // or model->forward(x)
//     engine.backward(loss);   // scaled by 1/accumulation; no_sync off-boundary
//     engine.step();           // optimizer + scheduler only at the boundary
//   }
//
// It wraps the module in DistributedDataParallel (or, with zero_optimization.stage
// 1-3, in ZeroDataParallel: zero/zero_data_parallel.h), takes the optimizer from the
// config's "optimizer" section or from the caller (an optimizer, or a factory
// over parameter groups, like deepspeed.initialize(optimizer=..., model_parameters=
// ...)), applies the LR schedule with DeepSpeed's timing (lr_schedules.h), clips
// gradients by their global L2 norm, and saves and loads checkpoints (model,
// optimizer state, scheduler position, step counters, every rank's RNG state,
// plus a caller's JSON "client state").
//
// Call order, per micro-batch: forward, backward(loss), step(). backward twice
// without step at an accumulation boundary, step twice after one backward, or a
// backward of a loss computed before the last step are errors that say what to
// do. Forward and backward run on the thread that calls step() (autograd numbers
// graph nodes per thread).
// With "wall_clock_breakdown": true it times forward, backward (and the part of
// it spent waiting for gradient all-reduces) and the optimizer step, and rank 0
// logs the per-step averages every steps_per_print steps.
//
// ZeRO-Infinity offload (zero_optimization.offload_optimizer / offload_param with
// device nvme, docs/offload.md): the optimizer state, and under stage 3 the
// parameter shards, live in files and are streamed through a few buffers;
// offload/nvme_offload.h.
//
// Mixed precision (the config's "fp16"/"bf16" sections, docs/precision.md): the
// module's float32 parameters are the master weights the optimizer steps, and
// the model computes with 16-bit activations (models/low_precision.h; the
// GPT's compute_dtype). Gradients are float32 and accumulate in float32; they
// travel as communication_data_type (the training dtype by default under DDP).
// With fp16, backward() multiplies the loss by the loss scale and step()
// unscales the gradients; an inf or nan in any gradient on any rank skips that
// step on every rank (counted in skipped_steps(), the schedule not advanced)
// and updates the scale with DeepSpeed's rules (precision/loss_scaler.h).
//
// Beyond synchronous data parallelism (docs/training-modes.md), under DDP only:
// data_parallel.comm_hook "powersgd" sends low-rank gradients (ddp/powersgd_hook.h);
// data_parallel.staleness 1 steps every rank on its own gradients and averages
// each step's update while the next step computes (ddp/delayed_averaging.h);
// local_sgd steps every rank on its own gradients after warmup_steps and
// averages the parameters every sync_every steps.
//
// Ownership: shares the module and the group; owns the DDP wrapper and optimizer.
// Movable, not copyable. Thread safety: none; one engine per rank, used from the
// thread that created it. backward/step/save/load are collective over the group.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <torch/nn/modules/container/any.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "tessera/comm/process_group.h"
#include "tessera/core/check.h"
#include "tessera/core/trace.h"
#include "tessera/runtime/checkpoint_saver.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/ddp/delayed_averaging.h"
#include "tessera/runtime/ddp/distributed_data_parallel.h"
#include "tessera/runtime/lr_schedules.h"
#include "tessera/runtime/named_params.h"
#include "tessera/runtime/observability.h"
#include "tessera/runtime/offload/nvme_offload.h"
#include "tessera/runtime/optimizer_factory.h"
#include "tessera/runtime/precision/loss_scaler.h"
#include "tessera/runtime/zero/zero_data_parallel.h"

namespace torch::autograd {
struct Node;
}

namespace tessera::runtime {

// What this rank holds now, in bytes, counted from the tensors' storages (each
// storage once), plus the process's peak resident set size.
struct MemoryStats {
  int64_t param_bytes = 0;      // parameters: whole, shards, and gathered stage-3 units alive
  int64_t grad_bytes = 0;       // gradients: DDP buckets, flat gradients or shards, live .grad
  int64_t optimizer_bytes = 0;  // optimizer state (moments, momentum buffers)
  int64_t buffer_bytes = 0;     // communication buffers in flight
  // nvme offload (docs/offload.md): host memory of its I/O buffers, and the disk
  // its swap files take (the offloaded state is in neither count above).
  int64_t offload_buffer_bytes = 0;
  int64_t offload_file_bytes = 0;
  int64_t peak_rss_bytes = 0;   // getrusage ru_maxrss of this process
  int64_t model_state_bytes() const { return param_bytes + grad_bytes + optimizer_bytes; }
};

// Per-step averages (milliseconds) over the last steps_per_print window, filled
// when wall_clock_breakdown is on.
struct WallClockBreakdown {
  int64_t steps = 0;             // optimizer steps in the window
  double forward_ms = 0;         // engine.forward() calls (0 if the model is called directly)
  double backward_ms = 0;        // engine.backward(), all-reduce waits included
  double allreduce_wait_ms = 0;  // of backward: waiting for buckets after autograd ended
  double step_ms = 0;            // clipping + optimizer step + zero_grad
};

class Engine {
 public:
  // The optimizer is built from the config's "optimizer" section (AdamW with
  // lr 1e-3 when there is none). Resolves the batch arithmetic for group->size();
  // ConfigError on bad configs.
  Engine(std::shared_ptr<torch::nn::Module> module, Config config,
         std::shared_ptr<comm::ProcessGroup> group);
  // The caller's optimizer, built over parameters of `module` (any subset, in any
  // groups). The config must have no "optimizer" section (ConfigError otherwise).
  // Its lr is left alone unless the config has a scheduler. Not with ZeRO, which
  // builds the optimizer over its shards: pass a factory instead.
  Engine(std::shared_ptr<torch::nn::Module> module, Config config,
         std::shared_ptr<comm::ProcessGroup> group,
         std::shared_ptr<torch::optim::Optimizer> optimizer);
  // The caller's factory, called once with `param_groups` (parameters of `module`
  // with optional per-group options; empty: one group of every trainable
  // parameter). The config must have no "optimizer" section.
  Engine(std::shared_ptr<torch::nn::Module> module, Config config,
         std::shared_ptr<comm::ProcessGroup> group, OptimizerFactory factory,
         std::vector<torch::optim::OptimizerParamGroup> param_groups = {});
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  ~Engine();

  // Calls the wrapped module's forward (timed for wall_clock_breakdown). Needs an
  // engine built by initialize() from a module holder whose forward is not
  // overloaded; otherwise a ConfigError (call the module directly instead).
  template <typename Return = at::Tensor, typename... Args>
  Return forward(Args&&... args) {
    TS_CHECK_T(ConfigError, forward_module_.has_value(),
               "Engine::forward needs the engine to be built with tessera::initialize(holder) "
               "from a module holder with one forward(); call the module's forward directly");
    const auto start = Clock::now();
    trace::Scope span("forward");
    Return out = forward_module_->forward<Return>(std::forward<Args>(args)...);
    if (config_.wall_clock_breakdown) window_.forward_ms += ms_since(start);
    return out;
  }
  // Gives the engine the module's forward (done by initialize() for holders).
  void set_forward(torch::nn::AnyModule forward_module) { forward_module_ = std::move(forward_module); }

  // Backward of loss / gradient_accumulation_steps. Off the accumulation boundary
  // gradients only accumulate locally; on it they are averaged across ranks.
  // Errors: a loss that does not require grad, the loss of a micro-batch already
  // backpropagated, a second backward at a boundary before step().
  void backward(const at::Tensor& loss);
  // At the accumulation boundary: clip, optimizer step, zero the gradients in
  // place, advance global_steps() and the schedule; returns true. Elsewhere a no-op
  // returning false. A second call after the same boundary backward is an error.
  bool step();
  // True when the next backward() completes an accumulation window.
  bool is_gradient_accumulation_boundary() const;
  // Zeroes the gradients in place (DDP buckets or ZeRO shards; step() already does).
  void zero_grad();

  int64_t global_steps() const { return global_steps_; }
  int64_t micro_steps() const { return micro_steps_; }
  // The lr the next optimizer step uses (of the first parameter group).
  double lr() const;
  // Global gradient L2 norm before clipping, measured at the last step (0 before).
  double last_grad_norm() const { return last_grad_norm_; }
  // fp16: the current loss scale (1 without fp16).
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  // Boundaries whose step was skipped because a gradient overflowed (fp16).
  int64_t skipped_steps() const { return skipped_steps_; }
  // Whether the last step() skipped its update.
  bool last_step_skipped() const { return last_step_skipped_; }
  // local_sgd and data_parallel.staleness: how many times the parameters (or,
  // delayed, the updates) have been averaged across ranks.
  int64_t parameter_averages() const;
  // Collective. data_parallel.staleness 1: waits for the update in flight and
  // sets every rank's parameters to the consensus (ddp/delayed_averaging.h), so
  // that they agree bitwise; save_checkpoint and load_checkpoint call it, and
  // so should evaluation that wants one model. A no-op in the other modes.
  void synchronize_parameters();

  // Collective. Saves this step as dir/step_<global_steps()> in the layout of
  // checkpoint/checkpoint_writer.h: rank 0 writes the model and optimizer state,
  // every rank its RNG state, the manifest (checksums, counters, schedule,
  // `client_state` of rank 0) is written last and dir/latest is then replaced
  // atomically. keep_last > 0 deletes older steps beyond the newest keep_last.
  // Returns the step directory. CheckpointError on every rank if any rank failed;
  // the previous checkpoint stays the latest.
  std::string save_checkpoint(const std::string& dir,
                              const nlohmann::json& client_state = nlohmann::json::object(),
                              int keep_last = 0);
  // Collective. `dir` is a checkpoint root (the newest step that verifies is
  // loaded, see checkpoint::latest_checkpoint) or one step directory. Restores
  // parameters and buffers (copied into the existing tensors), optimizer state,
  // step counters (hence the lr) and this rank's RNG; returns the client state.
  // Everything is verified on every rank before anything changes: a missing,
  // partial or corrupted checkpoint, another model or another optimizer type is
  // a CheckpointError on every rank naming the problem, with the engine intact.
  nlohmann::json load_checkpoint(const std::string& dir);
  // Collective. The checkpoint save_checkpoint writes, written in the background
  // (checkpoint.async_mode: runtime/checkpoint_saver.h): returns once this
  // rank's state is copied into host buffers, and training may go on while the
  // step is written and committed. Waits first for the previous save, whose
  // failure is thrown here. mode kDisabled saves synchronously. Returns what the
  // call blocked.
  checkpoint::AsyncSaveTimes save_checkpoint_async(
      const std::string& dir, const nlohmann::json& client_state = nlohmann::json::object(),
      int keep_last = 0, checkpoint::AsyncMode mode = checkpoint::AsyncMode::kAsync);
  // Blocks until the asynchronous save in flight is committed (nullopt: none in
  // flight). CheckpointError if it failed. Call it before the end of training:
  // the engine's destructor waits too, but can only log a failure.
  std::optional<checkpoint::CompletedSave> wait_for_checkpoint();

  // The last completed wall_clock_breakdown window (steps == 0 before one ends).
  const WallClockBreakdown& wall_clock_breakdown() const { return breakdown_; }

  // The ZeRO stage this engine runs (0: DistributedDataParallel).
  int zero_stage() const { return config_.zero.stage; }
  torch::nn::Module& module();
  // The DDP wrapper (ConfigError under ZeRO) or the ZeRO one (ConfigError at stage 0).
  ddp::DistributedDataParallel& ddp();
  zero::ZeroDataParallel& zero();
  // Bytes held by this rank now (see MemoryStats).
  MemoryStats memory_stats() const;
  // What the group has sent so far (comm_stats.h); subtract two snapshots for a step.
  comm::CommStats comm_stats() const { return group_->comm_stats(); }
  // The comms logger's table of this rank's operations so far (every group of
  // this rank, comm/comms_logger.h); empty unless the config's comms_logger is on.
  comm::CommSummary comm_summary() const { return observability_->comm_summary(); }
  // The timeline and the comms logger this engine runs (observability.h). The
  // destructor closes the timeline; call observability().finish_timeline() to
  // close it earlier and learn where rank 0 wrote the merged trace.
  Observability& observability() { return *observability_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  // The nvme offload (zero_optimization.offload_optimizer.device nvme), or null.
  const offload::NvmeOffload* offload() const { return offload_.get(); }
  // The optimizer's parameters with their module names, in optimizer order.
  const NamedParams& optimizer_parameters() const { return trainable_; }
  comm::ProcessGroup& group() { return *group_; }
  const Config& config() const { return config_; }

 private:
  using Clock = std::chrono::steady_clock;
  static double ms_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }
  // Wraps the module; the optimizer is installed by the constructors after it.
  Engine(std::shared_ptr<torch::nn::Module> module, Config config,
         std::shared_ptr<comm::ProcessGroup> group, bool user_optimizer);
  void adopt_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer);
  // ZeRO: shards `groups` and builds the optimizer over the shards with `build`.
  void shard_and_build(std::vector<ParamGroupSpec> groups,
                       const std::function<std::unique_ptr<torch::optim::Optimizer>(
                           std::vector<torch::optim::OptimizerParamGroup>)>& build);
  void apply_schedule();
  double clip_gradients();
  // The defined gradients of the optimizer's parameters (DDP buckets' views or
  // ZeRO shards).
  std::vector<at::Tensor> optimizer_gradients();
  // fp16: whether every gradient on every rank is finite (collective under ZeRO).
  bool gradients_finite();
  void scale_gradients(double factor);
  void close_breakdown_window();
  // local_sgd: past its warm-up, backward sends no gradients.
  bool local_sgd_active() const;
  // data_parallel.staleness 1 past its warm-up (staleness_warmup_steps).
  bool delayed_averaging_active() const;
  // Either of the two: gradients are not all-reduced in backward.
  bool gradients_stay_local() const;
  // local_sgd: every rank's parameters := their average (collective).
  void average_parameters();
  // What this rank contributes to a checkpoint of the current step.
  checkpoint::CheckpointState checkpoint_state(const nlohmann::json& client_state);
  CheckpointSaver& checkpoint_saver();

  // First, so destroyed last: the timeline closes after every member below has
  // finished communicating. Built in the constructor's body.
  std::unique_ptr<Observability> observability_;
  Config config_;
  std::shared_ptr<comm::ProcessGroup> group_;
  std::shared_ptr<torch::nn::Module> module_;
  std::unique_ptr<ddp::DistributedDataParallel> ddp_;  // stage 0
  // Declared before zero_ so that it outlives it: zero_'s stage-3 units read
  // their shards through the offload while they are torn down.
  std::unique_ptr<offload::NvmeOffload> offload_;
  std::unique_ptr<zero::ZeroDataParallel> zero_;      // stages 1-3
  std::vector<at::Tensor> buffers_;                   // module buffers (ZeRO syncs them)
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  NamedParams trainable_;  // what the optimizer steps, with module names
  std::vector<double> group_lrs_;  // each group's own lr, what WarmupCosineLR scales
  std::optional<torch::nn::AnyModule> forward_module_;
  LrSchedule schedule_;
  // Call-order contract: a boundary backward awaits its step(); the graph of the
  // last loss backpropagated, to refuse it a second time; the first autograd node
  // number after the last step, to refuse losses computed before it.
  bool step_pending_ = false;
  std::weak_ptr<torch::autograd::Node> last_loss_fn_;
  uint64_t first_node_after_step_ = 0;
  WallClockBreakdown window_;     // accumulating (sums)
  WallClockBreakdown breakdown_;  // last completed window (averages)
  int64_t global_steps_ = 0;
  int64_t micro_steps_ = 0;
  double last_grad_norm_ = 0.0;
  std::optional<precision::LossScaler> scaler_;  // fp16 only
  int64_t skipped_steps_ = 0;
  bool last_step_skipped_ = false;
  int64_t parameter_averages_ = 0;
  std::unique_ptr<ddp::DelayedAveraging> delayed_;  // staleness 1, from its first step
  // Last, so destroyed first: a save in flight commits while the group and the
  // timeline are still there. Made at the first save.
  std::unique_ptr<CheckpointSaver> checkpoint_saver_;
};

}  // namespace tessera::runtime

namespace tessera {
using Engine = runtime::Engine;
using OptimizerFactory = runtime::OptimizerFactory;

// Builds an Engine over `group`, or over the default group when group is null
// (calling tessera::init() first if needed, with the config's comm_timeout).
Engine initialize(std::shared_ptr<torch::nn::Module> module, Config config,
                  std::shared_ptr<comm::ProcessGroup> group = nullptr);
// With the caller's optimizer (see the Engine constructors).
Engine initialize(std::shared_ptr<torch::nn::Module> module, Config config,
                  std::shared_ptr<torch::optim::Optimizer> optimizer,
                  std::shared_ptr<comm::ProcessGroup> group = nullptr);
// With the caller's optimizer factory and parameter groups (empty: the config's).
Engine initialize(std::shared_ptr<torch::nn::Module> module, Config config,
                  OptimizerFactory factory,
                  std::vector<torch::optim::OptimizerParamGroup> param_groups = {},
                  std::shared_ptr<comm::ProcessGroup> group = nullptr);

namespace detail {
template <typename M, typename = void>
struct has_single_forward : std::false_type {};
template <typename M>
struct has_single_forward<M, std::void_t<decltype(&M::forward)>> : std::true_type {};
}  // namespace detail

// For module holders: tessera::initialize(MyNet(...), cfg[, optimizer or factory,
// ...]) takes the same arguments as the forms above. When the module has exactly
// one forward(), engine.forward(...) calls it.
template <typename Holder, typename... Rest,
          typename = decltype(std::declval<Holder>().ptr())>
Engine initialize(const Holder& module, Config config, Rest&&... rest) {
  Engine engine = initialize(std::static_pointer_cast<torch::nn::Module>(module.ptr()),
                             std::move(config), std::forward<Rest>(rest)...);
  if constexpr (detail::has_single_forward<typename Holder::ContainedType>::value) {
    engine.set_forward(torch::nn::AnyModule(module));
  }
  return engine;
}
}  // namespace tessera
