#include "tessera/runtime/engine.h"

#include <ATen/ATen.h>
#include <ATen/SequenceNumber.h>
#include <torch/csrc/autograd/function.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <unordered_map>

#include "tessera/comm/init.h"
#include "tessera/core/check.h"
#include "tessera/core/logging.h"
#include "tessera/core/worker_heartbeat.h"
#include "tessera/runtime/ddp/flat_params.h"
#include "tessera/runtime/grad_clip.h"
#include "tessera/runtime/optimizer_factory.h"
#include "tessera/runtime/optimizer_chunks.h"
#include "tessera/runtime/optimizer_state.h"
#include "tessera/runtime/replicas.h"
#include "tessera/runtime/storage_bytes.h"

namespace tessera::runtime {
namespace {

// The gradients' type on the wire: communication_data_type when written, else
// the training dtype under DDP (DeepSpeed's default) unless data_parallel.comm_hook
// says otherwise; float32 under ZeRO.
std::string wire_dtype(const Config& c) {
  const std::string& written = c.precision.communication_data_type;
  const std::string& hook = c.data_parallel.comm_hook;
  if (c.zero.stage > 0) {
    TS_CHECK_T(ConfigError, written.empty() || written == "fp32",
               "config 'communication_data_type': ", written, " is not supported with ZeRO "
               "stage ", c.zero.stage, " (its gradients are reduced in float32); set it to "
               "fp32 or remove it");
    return "fp32";
  }
  if (hook == "powersgd") {
    TS_CHECK_T(ConfigError, written.empty() || written == "fp32", "config "
               "'communication_data_type' is ", written, " but 'data_parallel.comm_hook' is "
               "powersgd (float32 low-rank factors); keep one of them");
    return hook;
  }
  if (!written.empty()) {
    TS_CHECK_T(ConfigError, hook == "none" || hook == written, "config "
               "'communication_data_type' is ", written, " but 'data_parallel.comm_hook' is ",
               hook, "; keep one of them");
    return written;
  }
  if (hook != "none") return hook;
  return c.precision.dtype;
}

ddp::DdpOptions ddp_options(const Config& config) {
  const DataParallelConfig& c = config.data_parallel;
  ddp::DdpOptions o;
  o.bucket_cap_mb = c.bucket_cap_mb;
  o.find_unused_parameters = c.find_unused_parameters;
  o.broadcast_buffers = c.broadcast_buffers;
  o.overlap_comm = c.overlap_comm;
  const std::string wire = wire_dtype(config);
  o.comm_hook = ddp::parse_comm_hook(wire == "fp32" ? "none" : wire);
  const PowerSgdConfig& p = c.powersgd;
  o.powersgd.matrix_approximation_rank = p.matrix_approximation_rank;
  o.powersgd.start_powersgd_iter = p.start_powersgd_iter;
  o.powersgd.min_compression_rate = p.min_compression_rate;
  o.powersgd.use_error_feedback = p.use_error_feedback;
  o.powersgd.warm_start = p.warm_start;
  o.powersgd.orthogonalization_epsilon = p.orthogonalization_epsilon;
  o.powersgd.random_seed = p.random_seed;
  return o;
}

std::optional<precision::LossScaler> make_scaler(const PrecisionConfig& p) {
  if (p.dtype != "fp16") return std::nullopt;
  precision::LossScalerOptions o;
  o.loss_scale = p.loss_scale;
  o.initial_scale_power = p.initial_scale_power;
  o.loss_scale_window = p.loss_scale_window;
  o.hysteresis = p.hysteresis;
  o.consecutive_hysteresis = p.consecutive_hysteresis;
  o.min_loss_scale = p.min_loss_scale;
  return precision::LossScaler(o);
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

// The optimizer's parameters, named after the module's: every one must be a
// trainable parameter of the module, and appear once.
NamedParams name_optimizer_params(const torch::optim::Optimizer& optimizer,
                                  torch::nn::Module& module) {
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (auto& p : module.named_parameters(true)) names[p.value().unsafeGetTensorImpl()] = p.key();
  NamedParams out;
  std::unordered_map<const c10::TensorImpl*, bool> seen;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      auto it = names.find(p.unsafeGetTensorImpl());
      TS_CHECK_T(ConfigError, it != names.end(), "the optimizer holds a tensor of shape ",
                 p.sizes(), " that is not a parameter of the model; build the optimizer over "
                 "the model's parameters (model->parameters() or named_parameters())");
      TS_CHECK_T(ConfigError, p.requires_grad(), "the optimizer holds parameter '", it->second,
                 "', which does not require grad");
      TS_CHECK_T(ConfigError, !seen[p.unsafeGetTensorImpl()], "parameter '", it->second,
                 "' is in more than one parameter group of the optimizer");
      seen[p.unsafeGetTensorImpl()] = true;
      out.names.push_back(it->second);
      out.params.push_back(p);
    }
  }
  return out;
}

Config resolved(Config c, int world) {
  c.resolve_batch(world);
  return c;
}

}  // namespace

Engine::Engine(std::shared_ptr<torch::nn::Module> module, Config config,
               std::shared_ptr<comm::ProcessGroup> group, bool user_optimizer)
    : config_(resolved(std::move(config), group ? group->size() : 1)),
      group_(std::move(group)),
      module_(std::move(module)),
      schedule_(config_.scheduler) {
  TS_CHECK_T(ConfigError, group_ != nullptr, "tessera::Engine needs a process group");
  TS_CHECK_T(ConfigError, module_ != nullptr, "tessera::Engine needs a module");
  TS_CHECK_T(ConfigError, !user_optimizer || !config_.optimizer.present,
             "the config has an \"optimizer\" section and an optimizer was passed to "
             "tessera::initialize as well; remove one of them");
  const auto& ranks = group_->global_ranks();
  observability_ = std::make_unique<Observability>(
      config_, ranks[group_->rank()], std::max(context_world_size(), group_->size()));
  for (const auto& b : module_->buffers()) buffers_.push_back(b);
  scaler_ = make_scaler(config_.precision);
  if (config_.zero.stage == 0) {
    ddp_ = std::make_unique<ddp::DistributedDataParallel>(module_, group_, ddp_options(config_));
  } else {
    wire_dtype(config_);  // ConfigError for 16-bit communication under ZeRO
  }
}

Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

Engine::Engine(std::shared_ptr<torch::nn::Module> module, Config config,
               std::shared_ptr<comm::ProcessGroup> group)
    : Engine(std::move(module), std::move(config), std::move(group), false) {
  if (!zero_stage()) {
    adopt_optimizer(make_optimizer(config_.optimizer, trainable(*module_)));
    return;
  }
  const OptimizerConfig oc = config_.optimizer;
  shard_and_build(config_param_groups(oc, trainable(*module_)),
                  [&oc](std::vector<torch::optim::OptimizerParamGroup> groups) {
                    return make_optimizer(oc, std::move(groups));
                  });
}

Engine::Engine(std::shared_ptr<torch::nn::Module> module, Config config,
               std::shared_ptr<comm::ProcessGroup> group,
               std::shared_ptr<torch::optim::Optimizer> optimizer)
    : Engine(std::move(module), std::move(config), std::move(group), true) {
  TS_CHECK_T(ConfigError, optimizer != nullptr, "tessera::initialize got a null optimizer");
  TS_CHECK_T(ConfigError, !zero_stage(), "ZeRO stage ", zero_stage(), " keeps only this rank's "
             "shard of the optimizer state, so it builds the optimizer itself over the shards: "
             "pass a factory (tessera::initialize(model, config, factory, param_groups)) "
             "instead of an optimizer");
  adopt_optimizer(std::move(optimizer));
}

Engine::Engine(std::shared_ptr<torch::nn::Module> module, Config config,
               std::shared_ptr<comm::ProcessGroup> group, OptimizerFactory factory,
               std::vector<torch::optim::OptimizerParamGroup> param_groups)
    : Engine(std::move(module), std::move(config), std::move(group), true) {
  TS_CHECK_T(ConfigError, factory != nullptr, "tessera::initialize got an empty optimizer factory");
  if (param_groups.empty()) param_groups.emplace_back(trainable(*module_).params);
  auto call = [&factory](std::vector<torch::optim::OptimizerParamGroup> groups) {
    auto optimizer = factory(std::move(groups));
    TS_CHECK_T(ConfigError, optimizer != nullptr, "the optimizer factory returned null");
    return optimizer;
  };
  if (!zero_stage()) {
    adopt_optimizer(call(std::move(param_groups)));
    return;
  }
  // Name the user's groups after the module, then let ZeRO shard them.
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (auto& p : module_->named_parameters(true)) names[p.value().unsafeGetTensorImpl()] = p.key();
  std::vector<ParamGroupSpec> specs;
  for (auto& g : param_groups) {
    ParamGroupSpec spec;
    for (const auto& p : g.params()) {
      auto it = names.find(p.unsafeGetTensorImpl());
      TS_CHECK_T(ConfigError, it != names.end(), "a parameter group holds a tensor of shape ",
                 p.sizes(), " that is not a parameter of the model");
      spec.params.names.push_back(it->second);
      spec.params.params.push_back(p);
    }
    if (g.has_options()) spec.options = g.options().clone();
    specs.push_back(std::move(spec));
  }
  shard_and_build(std::move(specs), call);
}

void Engine::shard_and_build(
    std::vector<ParamGroupSpec> groups,
    const std::function<std::unique_ptr<torch::optim::Optimizer>(
        std::vector<torch::optim::OptimizerParamGroup>)>& build) {
  std::vector<ParamGroupSpec> specs = std::move(groups);
  zero_ = std::make_unique<zero::ZeroDataParallel>(module_, group_, config_.zero, std::move(specs));
  optimizer_ = build(zero_->optimizer_groups());
  if (config_.zero.offload_optimizer.nvme()) {
    offload_ = std::make_unique<offload::NvmeOffload>(config_, *zero_, *optimizer_, group_->rank());
  }
  // Checkpoints and errors speak of the module's parameters, not the shards.
  trainable_ = NamedParams{};
  for (const auto& u : zero_->units()) {
    for (size_t i = 0; i < u->params().size(); ++i) {
      trainable_.names.push_back(u->names()[i]);
      trainable_.params.push_back(u->params()[i]);
    }
  }
  group_lrs_.clear();
  for (const auto& g : optimizer_->param_groups()) group_lrs_.push_back(g.options().get_lr());
  apply_schedule();
}

void Engine::adopt_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer) {
  optimizer_ = std::move(optimizer);
  trainable_ = name_optimizer_params(*optimizer_, *module_);
  group_lrs_.clear();
  for (const auto& g : optimizer_->param_groups()) group_lrs_.push_back(g.options().get_lr());
  apply_schedule();
}

torch::nn::Module& Engine::module() { return *module_; }

ddp::DistributedDataParallel& Engine::ddp() {
  TS_CHECK_T(ConfigError, ddp_ != nullptr, "this engine runs ZeRO stage ", zero_stage(),
             ", not DistributedDataParallel");
  return *ddp_;
}

zero::ZeroDataParallel& Engine::zero() {
  TS_CHECK_T(ConfigError, zero_ != nullptr, "this engine runs DistributedDataParallel (ZeRO "
             "stage 0)");
  return *zero_;
}

void Engine::zero_grad() {
  if (zero_) {
    zero_->zero_grad();
  } else {
    ddp_->zero_grad();
  }
}

void Engine::apply_schedule() {
  if (!schedule_.active()) return;
  // Skipped (overflowed) steps do not advance the schedule, as in DeepSpeed.
  const int64_t it = LrSchedule::iteration_after(global_steps_ - skipped_steps_);
  auto& groups = optimizer_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(schedule_.lr_at(it, group_lrs_[g]));
}

double Engine::lr() const { return optimizer_->param_groups().at(0).options().get_lr(); }

bool Engine::is_gradient_accumulation_boundary() const {
  return (micro_steps_ + 1) % config_.gradient_accumulation_steps == 0;
}

void Engine::backward(const at::Tensor& loss) {
  TS_CHECK(loss.defined() && loss.requires_grad(),
           "Engine::backward: the loss does not require grad; compute it from the model's "
           "outputs with autograd enabled");
  TS_CHECK(!step_pending_, "Engine::backward called again before step() at a gradient "
           "accumulation boundary; call engine.step() after every engine.backward()");
  const auto fn = loss.grad_fn();
  TS_CHECK(!fn || fn != last_loss_fn_.lock(),
           "Engine::backward got the loss it already backpropagated; run forward again to "
           "get the next micro-batch's loss");
  // LibTorch's optimizers update parameters through .data(), which autograd's
  // version counters do not see, so a stale graph would silently give gradients
  // of the old parameters. Autograd numbers its nodes in creation order: a loss
  // node older than the last step was computed before that step.
  TS_CHECK(!fn || fn->sequence_nr() >= first_node_after_step_,
           "Engine::backward: the loss was computed before the last engine.step() changed "
           "the parameters; run forward again after each step");
  const int64_t ga = config_.gradient_accumulation_steps;
  // Scaling the loss (not the gradients) keeps the accumulated sum an average;
  // fp16 multiplies it by the loss scale too, undone in step().
  const double factor = loss_scale() / static_cast<double>(ga);
  const at::Tensor scaled = factor != 1.0 ? loss * factor : loss;
  const auto start = Clock::now();
  trace::Scope span("backward");
  heartbeat::beat("backward");
  const bool boundary = is_gradient_accumulation_boundary();
  if (zero_) {
    zero_->backward(scaled, boundary);
  } else if (!boundary || gradients_stay_local()) {
    // Off the boundary, and under local SGD or delayed averaging after their
    // warm-up, gradients stay local.
    ddp_->reducer().bind_gradients();
    auto guard = ddp_->no_sync();
    scaled.backward();
  } else {
    ddp_->reducer().bind_gradients();
    ddp_->prepare_for_backward(scaled);
    scaled.backward();
  }
  if (ddp_ && boundary && config_.wall_clock_breakdown) {
    const auto& t = ddp_->reducer().last_timings();
    window_.allreduce_wait_ms +=
        std::chrono::duration<double, std::milli>(t.reduced - t.backward_end).count();
  }
  if (config_.wall_clock_breakdown) window_.backward_ms += ms_since(start);
  last_loss_fn_ = loss.grad_fn();
  step_pending_ = boundary;
  ++micro_steps_;
}

std::vector<at::Tensor> Engine::optimizer_gradients() {
  std::vector<at::Tensor> grads;
  // param_groups(), not the deprecated Optimizer::parameters(), which logs a
  // warning on every call.
  for (auto& group : optimizer_->param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
  }
  return grads;
}

double Engine::clip_gradients() {
  // ZeRO: each rank holds a shard of the gradients; the norm needs every rank's.
  if (zero_) return zero_->clip_grad_norm(config_.gradient_clipping);
  // After the all_reduce every rank holds the same averaged gradients, so the
  // local norm is the global norm: no extra collective.
  const std::vector<at::Tensor> grads = optimizer_gradients();
  const double norm = std::sqrt(squared_norm(grads));
  clip_to_norm(grads, norm, config_.gradient_clipping);
  return norm;
}

bool Engine::gradients_finite() {
  at::NoGradGuard no_grad;
  bool finite = true;
  for (const auto& g : optimizer_gradients()) {
    if (!at::isfinite(g).all().item<bool>()) {
      finite = false;
      break;
    }
  }
  // DDP: every rank holds the same averaged gradients (an inf anywhere is an inf
  // everywhere after the sum). ZeRO: each rank sees only its shard, and local
  // SGD and delayed averaging its own gradients, so agree.
  if (zero_ || gradients_stay_local()) {
    at::Tensor flag = at::full({1}, finite ? 0 : 1, at::kInt);
    group_->all_reduce(flag, comm::ReduceOp::kMax)->wait();
    finite = flag.item<int>() == 0;
  }
  return finite;
}

void Engine::scale_gradients(double factor) {
  at::NoGradGuard no_grad;
  for (auto& g : optimizer_gradients()) g.mul_(factor);
}

bool Engine::step() {
  if (micro_steps_ == 0 || micro_steps_ % config_.gradient_accumulation_steps != 0) return false;
  TS_CHECK(step_pending_, "Engine::step called twice after one backward(); run forward and "
           "backward for the next batch first");
  const auto start = Clock::now();
  trace::Scope span("optimizer step");
  heartbeat::beat("optimizer step");
  last_step_skipped_ = scaler_ && !gradients_finite();
  if (last_step_skipped_) {
    zero_grad();
    ++skipped_steps_;
    scaler_->update(true);  // ConfigError once overflow persists at the minimum scale
    if (group_->rank() == 0) {
      TS_LOG(INFO) << "step " << global_steps_ + 1 << ": fp16 gradient overflow, step skipped; "
                   << "loss scale now " << scaler_->scale();
    }
    ++global_steps_;
    step_pending_ = false;
    first_node_after_step_ = at::sequence_number::peek();
    apply_schedule();
    return true;
  }
  if (scaler_) {
    scale_gradients(1.0 / scaler_->scale());
    if (scaler_->update(false) && group_->rank() == 0) {
      TS_LOG(DEBUG) << "step " << global_steps_ + 1 << ": loss scale raised to "
                    << scaler_->scale();
    }
  }
  last_grad_norm_ = clip_gradients();
  const bool delayed = delayed_averaging_active();
  if (delayed) {
    if (!delayed_) delayed_ = std::make_unique<ddp::DelayedAveraging>(trainable_.params, group_);
    delayed_->begin_step();
  }
  if (offload_) {
    offload_->step(*optimizer_);
  } else if (zero_) {
    step_in_chunks(*optimizer_);  // shard-sized temporaries would fault in every step
  } else {
    optimizer_->step();
  }
  if (delayed) delayed_->end_step();  // this update out, the last one's average in
  if (zero_) {
    zero_->after_step();  // all-gathers the updated shards, zeroes the gradient shards
    if (config_.data_parallel.broadcast_buffers) broadcast_from_rank0(buffers_, *group_);
  } else {
    // In place in the buckets: .grad stays a view into them, whatever the LibTorch
    // version's zero_grad default.
    ddp_->zero_grad();
    ddp_->sync_buffers();
  }
  ++global_steps_;
  const LocalSgdConfig& local = config_.local_sgd;
  if (local.enabled && global_steps_ > local.warmup_steps &&
      (global_steps_ - local.warmup_steps) % local.sync_every == 0) {
    average_parameters();
  }
  step_pending_ = false;
  first_node_after_step_ = at::sequence_number::peek();
  apply_schedule();
  if (config_.wall_clock_breakdown) {
    window_.step_ms += ms_since(start);
    ++window_.steps;
    if (global_steps_ % config_.steps_per_print == 0) close_breakdown_window();
  }
  return true;
}

bool Engine::local_sgd_active() const {
  return config_.local_sgd.enabled && global_steps_ >= config_.local_sgd.warmup_steps;
}

bool Engine::delayed_averaging_active() const {
  const DataParallelConfig& dp = config_.data_parallel;
  return ddp_ && dp.staleness == 1 && global_steps_ >= dp.staleness_warmup_steps;
}

bool Engine::gradients_stay_local() const {
  return ddp_ && (local_sgd_active() || delayed_averaging_active());
}

void Engine::synchronize_parameters() {
  if (delayed_) delayed_->synchronize();
}

int64_t Engine::parameter_averages() const {
  return parameter_averages_ + (delayed_ ? delayed_->averages() : 0);
}

void Engine::average_parameters() {
  at::NoGradGuard no_grad;
  // One all_reduce per dtype of every trainable parameter laid end to end.
  for (auto& params : ddp::group_by_dtype(trainable_.params)) {
    at::Tensor flat = ddp::flatten(params);
    group_->all_reduce(flat, comm::ReduceOp::kAvg)->wait();
    ddp::unflatten_into(flat, params);
  }
  ++parameter_averages_;
}

MemoryStats Engine::memory_stats() const {
  MemoryStats m;
  StorageBytes bytes;
  if (zero_) {
    m.param_bytes = zero_->param_bytes();
    m.grad_bytes = zero_->grad_bytes();
    m.buffer_bytes = zero_->buffer_bytes();
    // Parameters no unit holds (frozen ones) are whole.
    for (const auto& u : zero_->units()) {
      for (const auto& p : u->params()) bytes.skip(p);
    }
    for (const auto& p : module_->parameters()) m.param_bytes += bytes(p);
  } else {
    for (const auto& p : module_->parameters()) m.param_bytes += bytes(p);
    for (const auto& flat : ddp_->reducer().bucket_buffers()) m.grad_bytes += bytes(flat);
  }
  m.optimizer_bytes = optimizer_state_bytes(*optimizer_);
  if (offload_) {
    const offload::OffloadStats s = offload_->stats();
    m.offload_buffer_bytes = s.buffer_bytes;
    m.offload_file_bytes = s.file_bytes;
  }
  m.peak_rss_bytes = peak_rss_bytes();
  return m;
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
namespace {

std::shared_ptr<comm::ProcessGroup> group_or_default(std::shared_ptr<comm::ProcessGroup> group,
                                                     const Config& config) {
  if (group) return group;
  if (!is_initialized()) {
    InitOptions options;
    if (config.comm_timeout > 0) options.timeout_seconds = config.comm_timeout;
    if (config.stall.check_time_seconds >= 0) {
      options.stall_warn_seconds = config.stall.check_time_seconds;
    }
    if (config.stall.shutdown_time_seconds >= 0) {
      options.stall_shutdown_seconds = config.stall.shutdown_time_seconds;
    }
    init(options);
  }
  return default_group();
}

}  // namespace

Engine initialize(std::shared_ptr<torch::nn::Module> module, Config config,
                  std::shared_ptr<comm::ProcessGroup> group) {
  group = group_or_default(std::move(group), config);
  return Engine(std::move(module), std::move(config), std::move(group));
}

Engine initialize(std::shared_ptr<torch::nn::Module> module, Config config,
                  std::shared_ptr<torch::optim::Optimizer> optimizer,
                  std::shared_ptr<comm::ProcessGroup> group) {
  group = group_or_default(std::move(group), config);
  return Engine(std::move(module), std::move(config), std::move(group), std::move(optimizer));
}

Engine initialize(std::shared_ptr<torch::nn::Module> module, Config config,
                  OptimizerFactory factory,
                  std::vector<torch::optim::OptimizerParamGroup> param_groups,
                  std::shared_ptr<comm::ProcessGroup> group) {
  group = group_or_default(std::move(group), config);
  return Engine(std::move(module), std::move(config), std::move(group), std::move(factory),
                std::move(param_groups));
}

}  // namespace tessera
