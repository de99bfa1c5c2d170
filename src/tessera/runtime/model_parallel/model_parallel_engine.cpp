#include "tessera/runtime/model_parallel/model_parallel_engine.h"

#include <ATen/ATen.h>

#include <cmath>

#include "tessera/core/check.h"
#include "tessera/core/trace.h"
#include "tessera/core/worker_heartbeat.h"
#include "tessera/parallel/pipeline/pipeline_schedule.h"
#include "tessera/parallel/pipeline/gpt_pipeline_stage.h"
#include "tessera/parallel/pipeline/llama_pipeline_stage.h"
#include "tessera/runtime/grad_clip.h"
#include "tessera/runtime/optimizer_factory.h"
#include "tessera/runtime/optimizer_chunks.h"
#include "tessera/runtime/optimizer_state.h"
#include "tessera/runtime/storage_bytes.h"

namespace tessera::runtime {
namespace {

// A weight_decay_exclude pattern the user wrote must match a parameter of the
// whole model; a stage that lacks what it names is not an error.
void check_exclude_patterns(const OptimizerConfig& c, const parallel::DecoderSpec& model) {
  if (!c.weight_decay_exclude_set || c.weight_decay <= 0) return;
  const auto& names = model.dense_names;
  for (const auto& pattern : c.weight_decay_exclude) {
    bool used = false;
    for (const auto& n : names) used = used || glob_match(pattern, n);
    TS_CHECK_T(ConfigError, used, "config 'optimizer.params.weight_decay_exclude' pattern '",
               pattern, "' matches no parameter of the ", model.family, "; names look like '", names.front(),
               "' (`*` matches any characters)");
  }
}

parallel::ProcessMesh checked_mesh(const parallel::DecoderSpec& model, Config& config,
                                   const std::shared_ptr<comm::ProcessGroup>& world) {
  TS_CHECK_T(ConfigError, world != nullptr, "ModelParallelEngine needs a process group");
  ModelParallelEngine::check_layout(model, config, world->size());
  const auto& mp = config.model_parallel;
  return parallel::ProcessMesh::build(world, mp.tensor_model_parallel_size,
                                      mp.pipeline_model_parallel_size, mp.context_parallel_size,
                                      mp.expert_model_parallel_size);
}

}  // namespace

int ModelParallelEngine::check_layout(const models::GPTConfig& model, Config& config, int world) {
  return check_layout(parallel::gpt_decoder_spec(model), config, world);
}

int ModelParallelEngine::check_layout(const models::LlamaConfig& model, Config& config, int world) {
  return check_layout(parallel::llama_decoder_spec(model), config, world);
}

int ModelParallelEngine::check_layout(const parallel::DecoderSpec& model, Config& config, int world) {
  const auto& mp = config.model_parallel;
  const int tp = mp.tensor_model_parallel_size, pp = mp.pipeline_model_parallel_size;
  const int v = mp.virtual_pipeline_model_parallel_size;
  const int dp = mp.data_parallel_size(world);
  if (mp.pipeline_partition_method == "parameters") {
    model.split_by_parameters(pp, v);
  } else {
    parallel::split_layers(model.num_layers, pp, v);
  }
  if (v > 1) {
    const int64_t n = model.num_layers;
    TS_CHECK_T(ConfigError, n % pp == 0 && (n / pp) % v == 0,
               "virtual_pipeline_model_parallel_size ", v, " does not divide the layers per ",
               "pipeline stage (", model.layers_key, " ", n, " / pipeline_model_parallel_size ",
               pp, "); every virtual stage needs the same number of layers");
  }
  model.check_tensor_parallel(tp, mp.sequence_parallel);
  TS_CHECK_T(ConfigError, mp.context_parallel_size == 1 || model.context_parallel,
             "context_parallel_size ", mp.context_parallel_size, " is not supported for the ",
             model.family, " (its attention over padded batches does not run across ranks); "
             "use 1");
  const int ep = mp.expert_model_parallel_size;
  TS_CHECK_T(ConfigError, ep == 1 || model.num_experts > 0, "expert_model_parallel_size ", ep,
             " needs a mixture-of-experts model (model.num_experts > 0); the ", model.family,
             " configured has no experts");
  TS_CHECK_T(ConfigError, model.num_experts == 0 || model.num_experts % ep == 0, "model.num_experts ",
             model.num_experts, " does not divide by expert_model_parallel_size ", ep,
             ": every expert-parallel rank holds the same number of experts");
  TS_CHECK_T(ConfigError, ep == 1 || dp % ep == 0, "expert_model_parallel_size ", ep,
             " does not divide the data-parallel size ", dp, " (world ", world,
             " / tensor x pipeline x context sizes); the experts are split over data-parallel ranks");
  TS_CHECK_T(ConfigError, config.zero.stage <= 1, "zero_optimization.stage ", config.zero.stage,
             " is not supported together with tensor or pipeline parallelism yet; use stage 1 "
             "(optimizer state sharded over the data-parallel group) or 0");
  TS_CHECK_T(ConfigError, !config.zero.offload_optimizer.nvme() && !config.zero.offload_param.nvme(),
             "zero_optimization offload to nvme is not supported together with tensor or "
             "pipeline parallelism yet; set the offload device to none (or cpu)");
  config.resolve_batch(dp);
  // Builds the schedule once, so a micro-batch count it cannot run fails here.
  parallel::make_pipeline_schedule(mp.pipeline_schedule, pp,
                                   static_cast<int>(config.gradient_accumulation_steps), v);
  check_exclude_patterns(config.optimizer, model);
  return dp;
}

ModelParallelEngine::ModelParallelEngine(const models::GPTConfig& model, Config config,
                                         std::shared_ptr<comm::ProcessGroup> world)
    : ModelParallelEngine(parallel::gpt_decoder_spec(model), std::move(config), std::move(world)) {}

ModelParallelEngine::ModelParallelEngine(const models::LlamaConfig& model, Config config,
                                         std::shared_ptr<comm::ProcessGroup> world)
    : ModelParallelEngine(parallel::llama_decoder_spec(model), std::move(config), std::move(world)) {}

ModelParallelEngine::ModelParallelEngine(parallel::DecoderSpec model, Config config,
                                         std::shared_ptr<comm::ProcessGroup> world)
    : config_(std::move(config)), model_(std::move(model)), mesh_(checked_mesh(model_, config_, world)),
      schedule_(config_.scheduler) {
  observability_ =
      std::make_unique<Observability>(config_, mesh_.world()->rank(), mesh_.world()->size());
  TS_CHECK_T(ConfigError, config_.precision.dtype != "fp16",
             "config 'fp16' (loss scaling) is not supported with tensor or pipeline parallelism "
             "yet; use bf16 (GPTConfig::compute_dtype = at::kBFloat16) there");
  const auto& mp = config_.model_parallel;
  const int v = mp.virtual_pipeline_model_parallel_size;
  stage_ = model_.build_stage(
      mesh_, parallel::DecoderStageOptions{v, mp.sequence_parallel, config_.seed,
                                           mp.pipeline_partition_method == "parameters",
                                           config_.activation_checkpointing.partition_activations,
                                           model_.initialize_weights,
                                           parallel::parse_cp_comm_type(mp.cp_comm_type),
                                           parallel::parse_token_dispatcher_type(
                                               mp.moe_token_dispatcher_type)});
  executor_ = std::make_unique<parallel::PipelineExecutor>(
      mesh_.pp(),
      parallel::make_pipeline_schedule(mp.pipeline_schedule, mesh_.topology().pp(),
                                       static_cast<int>(config_.gradient_accumulation_steps), v),
      v);
  for (auto& [name, t] : stage_->named_parameters()) {
    params_.names.push_back(name);
    params_.params.push_back(t);
  }
  // Patterns were checked against the whole model; a stage may lack some.
  OptimizerConfig local = config_.optimizer;
  local.weight_decay_exclude_set = false;
  if (config_.zero.stage == 1) {
    // ZeRO-1: each group's parameters in one flat unit sharded over dp; the
    // optimizer steps the shards. params_ lists the parameters in unit order.
    std::vector<torch::optim::OptimizerParamGroup> groups;
    NamedParams ordered;
    // Expert weights (MoE) are sharded over the ranks holding the same experts.
    for (auto& spec : config_param_groups(local, params_)) {
      for (const bool experts : {false, true}) {
        NamedParams part;
        for (size_t i = 0; i < spec.params.params.size(); ++i) {
          if (is_expert(spec.params.names[i]) != experts) continue;
          part.names.push_back(spec.params.names[i]);
          part.params.push_back(spec.params.params[i]);
        }
        if (part.params.empty()) continue;
        const auto& group = experts ? mesh_.expert_dp() : mesh_.replicas();
        units_.push_back(std::make_unique<zero::FlatUnit>(part.names, part.params, 1,
                                                          group->rank(), group->size()));
        unit_groups_.push_back(group);
        std::vector<at::Tensor> shard{units_.back()->shard()};
        if (spec.options) {
          groups.emplace_back(std::move(shard), spec.options->clone());
        } else {
          groups.emplace_back(std::move(shard));
        }
        for (size_t i = 0; i < part.params.size(); ++i) {
          ordered.names.push_back(part.names[i]);
          ordered.params.push_back(part.params[i]);
        }
      }
    }
    optimizer_ = make_optimizer(local, std::move(groups));
    params_ = std::move(ordered);
  } else {
    optimizer_ = make_optimizer(local, params_);
    // The optimizer's own order (decay group, then no-decay), for checkpoints.
    NamedParams ordered;
    for (const auto& g : optimizer_->param_groups()) {
      for (const auto& p : g.params()) {
        for (size_t i = 0; i < params_.params.size(); ++i) {
          if (params_.params[i].is_same(p)) {
            ordered.names.push_back(params_.names[i]);
            ordered.params.push_back(p);
          }
        }
      }
    }
    params_ = std::move(ordered);
  }
  for (const auto& g : optimizer_->param_groups()) group_lrs_.push_back(g.options().get_lr());
  apply_schedule();
  stage_->set_gradient_reduction([this] { average_over_data_parallel(); });
  stage_->set_optimizer([this] { optimizer_step(); });
  // Whole-model size: each rank's own parameters, duplicates once, over one
  // replica (an expert-parallel rank holds 1/ep of the experts a replica has).
  double own = 0;
  for (size_t i = 0; i < params_.names.size(); ++i) {
    if (stage_->is_duplicate(params_.names[i])) continue;
    own += static_cast<double>(params_.params[i].numel()) * (is_expert(params_.names[i]) ? ep() : 1);
  }
  num_parameters_ = static_cast<int64_t>(world_sum(own) / replica_count() + 0.5);
}

double ModelParallelEngine::world_sum(double local) {
  auto t = at::full({1}, local, at::kDouble);
  mesh_.world()->all_reduce(t)->wait();
  return t.item<double>();
}

double ModelParallelEngine::train_step(const at::Tensor& ids, const at::Tensor& targets) {
  heartbeat::beat("train_step");
  const int64_t m = config_.gradient_accumulation_steps;
  const int64_t want = m * config_.train_micro_batch_size_per_gpu;
  TS_CHECK(ids.dim() == 2 && ids.size(0) == want && targets.sizes() == ids.sizes(),
           "ModelParallelEngine::train_step wants ids and targets of [", want,
           ", T] (gradient_accumulation_steps x train_micro_batch_size_per_gpu), got ",
           ids.sizes(), " and ", targets.sizes());
  stage_->set_batch(local_tokens(ids), local_tokens(targets), static_cast<int>(m));
  if (units_.empty()) optimizer_->zero_grad();
  for (auto& u : units_) u->zero_grad();  // the flat gradients, .grad views rebound
  last_ = executor_->run(*stage_);
  // The loss lives on the last stage, the same on each of its tp ranks; each
  // cp rank's is the mean over its equal share of the tokens. MoE: every
  // stage adds its routers' auxiliary losses, as the dense GPT's loss does.
  const bool counts = last_.has_loss && mesh_.coord().tp == 0;
  const double aux = mesh_.coord().tp == 0 ? stage_->take_auxiliary_loss() / static_cast<double>(m) : 0.0;
  return world_sum((counts ? last_.loss : 0.0) + aux) / replica_count();
}

double ModelParallelEngine::evaluate(const at::Tensor& ids, const at::Tensor& targets) {
  const int64_t micro = config_.train_micro_batch_size_per_gpu;
  TS_CHECK(ids.dim() == 2 && ids.size(0) % micro == 0 && targets.sizes() == ids.sizes(),
           "ModelParallelEngine::evaluate wants ids and targets of [n x ", micro, ", T], got ",
           ids.sizes(), " and ", targets.sizes());
  const int n = static_cast<int>(ids.size(0) / micro);
  stage_->set_batch(local_tokens(ids), local_tokens(targets), n);
  stage_->set_training(false);  // no dropout
  const auto r = executor_->evaluate(*stage_, n);
  stage_->set_training(true);
  const bool counts = r.has_loss && mesh_.coord().tp == 0;
  const double aux = mesh_.coord().tp == 0 ? stage_->take_auxiliary_loss() / n : 0.0;
  return world_sum((counts ? r.loss : 0.0) + aux) / replica_count();
}

bool ModelParallelEngine::is_expert(const std::string& name) const {
  return stage_->slice_of(name).experts;
}

at::Tensor ModelParallelEngine::take_tokens_per_expert() {
  if (model_.num_experts == 0) return {};
  at::Tensor mine = stage_->take_tokens_per_expert();
  if (!mine.defined() || mesh_.coord().tp != 0) {
    // Every rank takes part; tp ranks > 0 saw the same tokens as their rank 0.
    mine = at::zeros({model_.num_layers, model_.num_experts}, at::kLong);
  }
  mine = mine.contiguous();
  mesh_.world()->all_reduce(mine)->wait();
  return mine;
}

at::Tensor ModelParallelEngine::local_tokens(const at::Tensor& batch) const {
  const int cp = mesh_.topology().cp();
  return cp == 1 ? batch : parallel::context_parallel_shard(batch, 1, mesh_.coord().cp, cp);
}

void ModelParallelEngine::average_over_data_parallel() {
  // An expert's gradient on its ep rank already sums the losses of the ep
  // group's replicas (the all-to-all carries them back): averaged over the
  // copies of the expert (expert_dp), it still needs 1/ep to be the replicas' mean.
  const double expert_scale = 1.0 / ep();
  if (!units_.empty()) {  // ZeRO-1: each rank ends with its shard's mean gradient
    for (size_t i = 0; i < units_.size(); ++i) {
      units_[i]->launch_reduce(*unit_groups_[i], config_.zero.reduce_scatter);
    }
    for (size_t i = 0; i < units_.size(); ++i) {
      units_[i]->finish_reduce();
      if (unit_groups_[i] != mesh_.replicas() && ep() > 1) units_[i]->grad_shard().mul_(expert_scale);
    }
    return;
  }
  at::NoGradGuard no_grad;
  for (const bool experts : {false, true}) {
    comm::ProcessGroup& group = experts ? *mesh_.expert_dp() : *mesh_.replicas();
    std::vector<at::Tensor> grads;
    for (size_t i = 0; i < params_.params.size(); ++i) {
      if (is_expert(params_.names[i]) != experts) continue;
      auto& p = params_.params[i];
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      grads.push_back(p.mutable_grad());
      if (experts && ep() > 1) grads.back().mul_(expert_scale);
    }
    average_in_buckets(grads, group);
  }
}

void ModelParallelEngine::average_in_buckets(std::vector<at::Tensor>& grads,
                                             comm::ProcessGroup& group) {
  if (group.size() == 1) return;
  // Buckets of bucket_cap_mb, each one flat all-reduce.
  const int64_t cap = static_cast<int64_t>(config_.data_parallel.bucket_cap_mb * 1048576.0 / 4.0);
  std::vector<at::Tensor> bucket;
  int64_t filled = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    std::vector<at::Tensor> flat_views;
    for (auto& g : bucket) flat_views.push_back(g.reshape({-1}));
    auto flat = at::cat(flat_views);
    group.all_reduce(flat, comm::ReduceOp::kAvg)->wait();
    int64_t at_ = 0;
    for (auto& g : bucket) {
      g.copy_(flat.narrow(0, at_, g.numel()).view_as(g));
      at_ += g.numel();
    }
    bucket.clear();
    filled = 0;
  };
  for (auto& g : grads) {
    bucket.push_back(g);
    filled += g.numel();
    if (filled >= cap) flush();
  }
  flush();
}

double ModelParallelEngine::clip_gradients() {
  at::NoGradGuard no_grad;
  if (!units_.empty()) {
    // The shards tile each replica's gradients once: no division by dp.
    // Expert units tile the ep group's experts once over expert_dp likewise.
    double sq = 0;
    for (size_t i = 0; i < units_.size(); ++i) {
      auto& u = units_[i];
      for (const zero::Piece& p : u->partition().pieces_of_rank(unit_groups_[i]->rank())) {
        if (stage_->is_duplicate(u->names()[p.param])) continue;
        sq += u->grad_shard().narrow(0, p.shard_offset, p.numel).to(at::kDouble).pow(2).sum().item<double>();
      }
    }
    const double norm = std::sqrt(world_sum(sq));
    std::vector<at::Tensor> shards;
    for (auto& u : units_) shards.push_back(u->grad_shard());
    clip_to_norm(shards, norm, config_.gradient_clipping);
    return norm;
  }
  std::vector<at::Tensor> all, counted, experts;
  for (size_t i = 0; i < params_.params.size(); ++i) {
    const auto& g = params_.params[i].grad();
    all.push_back(g);
    if (!g.defined() || stage_->is_duplicate(params_.names[i])) continue;
    (is_expert(params_.names[i]) ? experts : counted).push_back(g);
  }
  // Replicas hold the same averaged gradients: one replica's share of the sum.
  // An expert is held by replicas / ep of them, so its squares count ep times.
  const double local = squared_norm(counted) + ep() * squared_norm(experts);
  const double norm = std::sqrt(world_sum(local) / replica_count());
  clip_to_norm(all, norm, config_.gradient_clipping);
  return norm;
}

void ModelParallelEngine::optimizer_step() {
  trace::Scope span("optimizer step");
  heartbeat::beat("optimizer step");
  last_grad_norm_ = clip_gradients();
  if (units_.empty()) {
    optimizer_->step();
  } else {
    step_in_chunks(*optimizer_);  // ZeRO-1 shards: see optimizer_chunks.h
  }
  for (size_t i = 0; i < units_.size(); ++i) units_[i]->launch_gather(*unit_groups_[i]);
  for (auto& u : units_) u->finish_gather();
  ++global_steps_;
  apply_schedule();
}

void ModelParallelEngine::apply_schedule() {
  if (!schedule_.active()) return;
  const int64_t it = LrSchedule::iteration_after(global_steps_);
  auto& groups = optimizer_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(schedule_.lr_at(it, group_lrs_[g]));
}

double ModelParallelEngine::lr() const { return optimizer_->param_groups().at(0).options().get_lr(); }

MemoryStats ModelParallelEngine::memory_stats() const {
  MemoryStats m;
  StorageBytes bytes;
  for (const auto& p : params_.params) m.param_bytes += bytes(p);
  for (const auto& u : units_) m.grad_bytes += u->grad_bytes();  // .grad are views into them
  if (units_.empty()) {
    for (const auto& p : params_.params) m.grad_bytes += bytes(p.grad());
  }
  m.optimizer_bytes = optimizer_state_bytes(*optimizer_);
  m.peak_rss_bytes = peak_rss_bytes();
  return m;
}

}  // namespace tessera::runtime
