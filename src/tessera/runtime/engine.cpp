#include "tessera/runtime/engine.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>

#include "tessera/comm/init.h"
#include "tessera/core/check.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/optimizer_factory.h"

namespace tessera::runtime {
namespace {

ddp::DdpOptions ddp_options(const DataParallelConfig& c) {
  ddp::DdpOptions o;
  o.bucket_cap_mb = c.bucket_cap_mb;
  o.find_unused_parameters = c.find_unused_parameters;
  o.broadcast_buffers = c.broadcast_buffers;
  o.comm_hook = ddp::parse_comm_hook(c.comm_hook);
  return o;
}

NamedParams trainable(torch::nn::Module& m) {
  NamedParams out;
  for (auto& p : m.named_parameters(true)) {
    if (!p.value().requires_grad()) continue;
    out.names.push_back(p.key());
    out.params.push_back(p.value());
  }
  return out;
}

Config resolved(Config c, int world) {
  c.resolve_batch(world);
  return c;
}

}  // namespace

Engine::Engine(std::shared_ptr<torch::nn::Module> module, Config config,
               std::shared_ptr<comm::ProcessGroup> group)
    : config_(resolved(std::move(config), group ? group->size() : 1)),
      group_(std::move(group)),
      schedule_(config_.scheduler, config_.optimizer.lr) {
  TS_CHECK_T(ConfigError, group_ != nullptr, "tessera::Engine needs a process group");
  ddp_ = std::make_unique<ddp::DistributedDataParallel>(std::move(module), group_,
                                                        ddp_options(config_.data_parallel));
  trainable_ = trainable(ddp_->module());
  optimizer_ = make_optimizer(config_.optimizer, trainable_.params);
  set_learning_rate(*optimizer_, lr());
}

bool Engine::is_gradient_accumulation_boundary() const {
  return (micro_steps_ + 1) % config_.gradient_accumulation_steps == 0;
}

void Engine::backward(const at::Tensor& loss) {
  const int64_t ga = config_.gradient_accumulation_steps;
  // Scaling the loss (not the gradients) keeps the accumulated sum an average.
  const at::Tensor scaled = ga > 1 ? loss / static_cast<double>(ga) : loss;
  const auto start = Clock::now();
  if (!is_gradient_accumulation_boundary()) {
    auto guard = ddp_->no_sync();
    scaled.backward();
  } else {
    ddp_->prepare_for_backward(scaled);
    scaled.backward();
    if (config_.wall_clock_breakdown) {
      const auto& t = ddp_->reducer().last_timings();
      window_.allreduce_wait_ms +=
          std::chrono::duration<double, std::milli>(t.reduced - t.backward_end).count();
    }
  }
  if (config_.wall_clock_breakdown) window_.backward_ms += ms_since(start);
  ++micro_steps_;
}

double Engine::clip_gradients() {
  // After the all_reduce every rank holds the same averaged gradients, so the
  // local norm is the global norm: no extra collective.
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  // param_groups(), not the deprecated Optimizer::parameters(), which logs a
  // warning on every call in LibTorch 1.13.
  for (auto& group : optimizer_->param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
  }
  if (grads.empty()) return 0.0;
  at::Tensor sq = at::zeros({}, grads[0].options().dtype(at::kDouble));
  for (auto& g : grads) sq += g.to(at::kDouble).pow(2).sum();
  const double norm = std::sqrt(sq.item<double>());
  const double max_norm = config_.gradient_clipping;
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (auto& g : grads) g.mul_(scale);
  }
  return norm;
}

bool Engine::step() {
  if (micro_steps_ == 0 || micro_steps_ % config_.gradient_accumulation_steps != 0) return false;
  const auto start = Clock::now();
  last_grad_norm_ = clip_gradients();
  set_learning_rate(*optimizer_, lr());
  optimizer_->step();
  // zero_grad zeroes in place, so .grad stays a view into the DDP buckets.
  optimizer_->zero_grad();
  ++global_steps_;
  ddp_->sync_buffers();
  set_learning_rate(*optimizer_, lr());
  if (config_.wall_clock_breakdown) {
    window_.step_ms += ms_since(start);
    ++window_.steps;
    if (global_steps_ % config_.steps_per_print == 0) close_breakdown_window();
  }
  return true;
}

void Engine::close_breakdown_window() {
  const double n = static_cast<double>(window_.steps);
  breakdown_ = window_;
  breakdown_.forward_ms /= n;
  breakdown_.backward_ms /= n;
  breakdown_.allreduce_wait_ms /= n;
  breakdown_.step_ms /= n;
  window_ = WallClockBreakdown{};
  if (group_->rank() != 0) return;
  char line[200];
  std::snprintf(line, sizeof(line),
                "time per step (ms, mean of %lld): forward %.2f | backward %.2f (all-reduce "
                "wait %.2f) | optimizer step %.2f",
                static_cast<long long>(breakdown_.steps), breakdown_.forward_ms,
                breakdown_.backward_ms, breakdown_.allreduce_wait_ms, breakdown_.step_ms);
  TS_LOG(INFO) << "step " << global_steps_ << " " << line;
}

}  // namespace tessera::runtime

namespace tessera {

Engine initialize(std::shared_ptr<torch::nn::Module> module, Config config,
                  std::shared_ptr<comm::ProcessGroup> group) {
  if (!group) {
    if (!is_initialized()) init();
    group = default_group();
  }
  return Engine(std::move(module), std::move(config), std::move(group));
}

}  // namespace tessera
