// Engine: the DeepSpeed-style training loop driver for data-parallel training.
//
//   auto engine = tessera::initialize(model, tessera::Config::from_file("ds.json"));
//   for (...) {
//     auto loss = loss_fn(model->forward(x), y);
//     engine.backward(loss);   // scaled by 1/accumulation; no_sync off-boundary
//     engine.step();           // optimizer + scheduler only at the boundary
//   }
//
// It wraps the module in DistributedDataParallel, builds the optimizer and LR
// schedule from the config, clips gradients by their global L2 norm, and saves
// and loads checkpoints (model, optimizer state, scheduler position, step
// counters, every rank's RNG state, plus a caller's JSON "client state").
//
// Ownership: shares the module and the group; owns the DDP wrapper and optimizer.
// Movable, not copyable. Thread safety: none; one engine per rank, used from the
// thread that created it. backward/step/save/load are collective over the group.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>

#include "tessera/comm/process_group.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/ddp/distributed_data_parallel.h"
#include "tessera/runtime/lr_schedules.h"

namespace tessera::runtime {

class Engine {
 public:
  // Resolves the batch arithmetic for group->size(); ConfigError on bad configs.
  Engine(std::shared_ptr<torch::nn::Module> module, Config config,
         std::shared_ptr<comm::ProcessGroup> group);
  Engine(Engine&&) = default;
  Engine& operator=(Engine&&) = default;

  // Backward of loss / gradient_accumulation_steps. Off the accumulation boundary
  // gradients only accumulate locally; on it they are averaged across ranks.
  void backward(const at::Tensor& loss);
  // At the accumulation boundary: clip, set the scheduled lr, optimizer step,
  // zero the gradients, advance global_steps(); returns true. Elsewhere a no-op
  // returning false.
  bool step();
  // True when the next backward() completes an accumulation window.
  bool is_gradient_accumulation_boundary() const;

  int64_t global_steps() const { return global_steps_; }
  int64_t micro_steps() const { return micro_steps_; }
  // The lr the next optimizer step uses.
  double lr() const { return schedule_.lr_at(global_steps_); }
  // Global gradient L2 norm before clipping, measured at the last step (0 before).
  double last_grad_norm() const { return last_grad_norm_; }

  // Collective. Writes `dir` (created if needed): rank 0 writes the model,
  // optimizer and state JSON (last, so a directory with state.json is complete);
  // every rank writes its RNG state. CheckpointError on I/O failure.
  void save_checkpoint(const std::string& dir,
                       const nlohmann::json& client_state = nlohmann::json::object());
  // Collective. Restores what save_checkpoint wrote and returns the client state.
  // CheckpointError if the directory is missing or incomplete or the model differs.
  nlohmann::json load_checkpoint(const std::string& dir);

  torch::nn::Module& module() { return ddp_->module(); }
  ddp::DistributedDataParallel& ddp() { return *ddp_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  comm::ProcessGroup& group() { return *group_; }
  const Config& config() const { return config_; }

 private:
  double clip_gradients();

  Config config_;
  std::shared_ptr<comm::ProcessGroup> group_;
  std::unique_ptr<ddp::DistributedDataParallel> ddp_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  LrSchedule schedule_;
  int64_t global_steps_ = 0;
  int64_t micro_steps_ = 0;
  double last_grad_norm_ = 0.0;
};

}  // namespace tessera::runtime

namespace tessera {
using Engine = runtime::Engine;

// Builds an Engine over `group`, or over the default group (calling
// tessera::init() first if needed) when group is null.
Engine initialize(std::shared_ptr<torch::nn::Module> module, Config config,
                  std::shared_ptr<comm::ProcessGroup> group = nullptr);

// Convenience for module holders: tessera::initialize(MyNet(...), cfg).
template <typename Holder, typename = decltype(std::declval<Holder>().ptr())>
Engine initialize(const Holder& module, Config config,
                  std::shared_ptr<comm::ProcessGroup> group = nullptr) {
  return initialize(std::static_pointer_cast<torch::nn::Module>(module.ptr()), std::move(config),
                    std::move(group));
}
}  // namespace tessera
