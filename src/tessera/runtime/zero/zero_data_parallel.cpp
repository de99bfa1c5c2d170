#include "tessera/runtime/zero/zero_data_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "tessera/core/check.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/grad_clip.h"
#include "tessera/runtime/replicas.h"

namespace tessera::runtime::zero {
namespace {

using torch::autograd::variable_list;

// Post hook on a gradient accumulator; the cell is cleared when the owner dies,
// because accumulators (and their hooks) can outlive it.
class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::shared_ptr<ZeroDataParallel*> owner, std::function<void(ZeroDataParallel*)> fn)
      : owner_(std::move(owner)), fn_(std::move(fn)) {}
  variable_list operator()(const variable_list& outputs, const variable_list&) override {
    if (ZeroDataParallel* z = *owner_) fn_(z);
    return outputs;
  }

 private:
  std::shared_ptr<ZeroDataParallel*> owner_;
  std::function<void(ZeroDataParallel*)> fn_;
};

struct ParamInfo {
  size_t group;
  std::string name;
  at::Tensor tensor;
};

}  // namespace

ZeroDataParallel::ZeroDataParallel(std::shared_ptr<torch::nn::Module> module,
                                   std::shared_ptr<comm::ProcessGroup> group,
                                   const ZeroConfig& config, std::vector<ParamGroupSpec> groups)
    : module_(std::move(module)),
      group_(std::move(group)),
      config_(config),
      self_(std::make_shared<ZeroDataParallel*>(this)) {
  TS_CHECK_T(ConfigError, module_ && group_, "ZeRO needs a module and a process group");
  TS_CHECK_T(ConfigError, config_.stage >= 1 && config_.stage <= 3, "ZeRO stage must be 1, 2 or 3");
  verify_replicas_match(*module_, *group_, "ZeRO");
  {
    std::vector<at::Tensor> all;
    for (const auto& p : module_->parameters()) all.push_back(p);
    for (const auto& b : module_->buffers()) all.push_back(b);
    broadcast_from_rank0(all, *group_);
  }
  if (config_.stage == 3 && sharded_units(*module_).empty()) {
    // The default units: Sequential entries big enough to be worth sharding.
    try {
      shard(*module_, ShardPolicy::min_num_params(
                          std::max<int64_t>(1, config_.stage3_param_persistence_threshold)));
    } catch (const ConfigError& e) {
      TS_LOG_RANK0(WARN) << "ZeRO stage 3: " << e.bare_message()
                         << "; every parameter stays whole (as under stage 2)";
    }
  }
  build_units(groups);
  install_hooks();
  for (size_t m = 0; m < modules_.size(); ++m) modules_[m].wrapper->attach(this, m);
  reset_backward();
}

ZeroDataParallel::~ZeroDataParallel() {
  *self_ = nullptr;
  for (auto& m : modules_) m.wrapper->attach(nullptr, 0);
  for (auto& u : units_) {
    try {
      u->finish_reduce();
      u->finish_gather();
    } catch (...) {
      // Reported by the operation that failed.
    }
  }
}

void ZeroDataParallel::add_bucketed_units(const NamedParams& params, size_t group_index,
                                          int stage) {
  // One dtype per unit: bucket each dtype's parameters on their own.
  std::map<at::ScalarType, NamedParams> by_dtype;
  for (size_t i = 0; i < params.params.size(); ++i) {
    auto& d = by_dtype[params.params[i].scalar_type()];
    d.names.push_back(params.names[i]);
    d.params.push_back(params.params[i]);
  }
  for (auto& [dtype, d] : by_dtype) {
    std::vector<int64_t> numels;
    for (const auto& p : d.params) numels.push_back(p.numel());
    for (const auto& bucket : bucket_units(numels, config_.reduce_bucket_size)) {
      std::vector<std::string> names;
      std::vector<at::Tensor> tensors;
      for (size_t i : bucket) {
        names.push_back(d.names[i]);
        tensors.push_back(d.params[i]);
      }
      units_.push_back(std::make_unique<FlatUnit>(std::move(names), std::move(tensors), stage,
                                                  group_->rank(), group_->size()));
      unit_group_.push_back(group_index);
      module_of_unit_.push_back(-1);
    }
  }
}

void ZeroDataParallel::build_units(std::vector<ParamGroupSpec>& groups) {
  std::unordered_map<const c10::TensorImpl*, ParamInfo> info;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& np = groups[g].params;
    for (size_t i = 0; i < np.params.size(); ++i) {
      info[np.params[i].unsafeGetTensorImpl()] = {g, np.names[i], np.params[i]};
    }
    group_options_.push_back(std::move(groups[g].options));
  }
  std::unordered_map<const c10::TensorImpl*, bool> in_unit;
  if (config_.stage == 3) {
    for (auto& [path, wrapper] : sharded_units(*module_)) {
      ModuleUnit m;
      m.path = path;
      m.wrapper = wrapper;
      std::map<std::pair<size_t, int>, NamedParams> parts;  // (group, dtype)
      for (auto& p : wrapper->named_parameters(true)) {
        auto it = info.find(p.value().unsafeGetTensorImpl());
        if (it == info.end() || p.value().numel() == 0) continue;
        if (p.value().numel() < config_.stage3_param_persistence_threshold) continue;
        auto& part = parts[{it->second.group, static_cast<int>(p.value().scalar_type())}];
        part.names.push_back(it->second.name);
        part.params.push_back(p.value());
        in_unit[p.value().unsafeGetTensorImpl()] = true;
      }
      for (auto& [key, part] : parts) {
        m.flat_units.push_back(units_.size());
        for (const auto& t : part.params) m.numel += t.numel();
        units_.push_back(std::make_unique<FlatUnit>(part.names, part.params, 3, group_->rank(),
                                                    group_->size()));
        unit_group_.push_back(key.first);
        module_of_unit_.push_back(static_cast<int>(modules_.size()));
      }
      if (!m.flat_units.empty()) modules_.push_back(std::move(m));
    }
  }
  // Everything else stays whole on every rank: stage 1 or 2 units.
  const int whole_stage = config_.stage == 3 ? 2 : config_.stage;
  for (size_t g = 0; g < groups.size(); ++g) {
    NamedParams rest;
    const auto& np = groups[g].params;
    for (size_t i = 0; i < np.params.size(); ++i) {
      if (in_unit.count(np.params[i].unsafeGetTensorImpl()) || np.params[i].numel() == 0) continue;
      rest.names.push_back(np.names[i]);
      rest.params.push_back(np.params[i]);
    }
    if (!rest.params.empty()) add_bucketed_units(rest, g, whole_stage);
  }
  for (const auto& u : units_) {
    for (const auto& n : u->names()) names_.push_back(n);
  }
}

void ZeroDataParallel::install_hooks() {
  for (size_t u = 0; u < units_.size(); ++u) {
    const auto& params = units_[u]->params();
    for (size_t i = 0; i < params.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params[i]);
      TS_INTERNAL_ASSERT(acc != nullptr, "no gradient accumulator for ", units_[u]->names()[i]);
      acc->add_post_hook(std::make_unique<ReadyHook>(
          self_, [u, i](ZeroDataParallel* z) { z->on_grad_ready(u, i); }));
      accumulators_.push_back(std::move(acc));
    }
  }
  launch_order_.resize(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) launch_order_[u] = u;
}

std::vector<torch::optim::OptimizerParamGroup> ZeroDataParallel::optimizer_groups() {
  std::vector<torch::optim::OptimizerParamGroup> out;
  for (size_t g = 0; g < group_options_.size(); ++g) {
    std::vector<at::Tensor> shards;
    for (size_t u = 0; u < units_.size(); ++u) {
      if (unit_group_[u] == g) shards.push_back(units_[u]->shard());
    }
    if (group_options_[g]) {
      out.emplace_back(std::move(shards), std::move(group_options_[g]));
    } else {
      out.emplace_back(std::move(shards));
    }
  }
  group_options_.clear();
  return out;
}

void ZeroDataParallel::reset_backward() {
  pending_.assign(units_.size(), 0);
  for (size_t u = 0; u < units_.size(); ++u) pending_[u] = units_[u]->params().size();
  ready_.assign(units_.size(), false);
  next_launch_ = 0;
  in_backward_ = false;
  if (!order_learned_) observed_order_.clear();
}

void ZeroDataParallel::backward(const at::Tensor& loss, bool boundary) {
  reducing_ = config_.stage != 1 || boundary;
  for (auto& u : units_) {
    u->bind_gradients();
    u->set_keep_reduce_buffers(!boundary);
  }
  try {
    loss.backward();
  } catch (...) {
    for (auto& u : units_) {
      try {
        u->finish_reduce();
      } catch (...) {
      }
    }
    reset_backward();
    throw;
  }
  if (in_backward_) finalize_backward();  // the engine callback did not run (no hooks fired)
}

void ZeroDataParallel::on_grad_ready(size_t unit, size_t param) {
  if (!reducing_) return;
  if (!in_backward_) {
    in_backward_ = true;
    std::shared_ptr<ZeroDataParallel*> self = self_;
    torch::autograd::Engine::get_default_engine().queue_callback([self] {
      if (ZeroDataParallel* z = *self) z->finalize_backward();
    });
  }
  TS_CHECK(pending_[unit] > 0, "ZeRO: parameter '", units_[unit]->names()[param],
           "' received its gradient twice in one backward pass; reentrant backward is not "
           "supported");
  if (--pending_[unit] == 0) unit_ready(unit);
}

void ZeroDataParallel::unit_ready(size_t unit) {
  ready_[unit] = true;
  if (!order_learned_) observed_order_.push_back(unit);
  const int m = module_of_unit_[unit];
  if (m >= 0) {
    // The module's weights are no longer needed once all its gradients exist.
    bool all = true;
    for (size_t f : modules_[m].flat_units) all = all && ready_[f];
    if (all) release_module(static_cast<size_t>(m));
  }
  if (order_learned_ && config_.overlap()) launch_ready_in_order();
}

void ZeroDataParallel::launch_ready_in_order() {
  // At most kMaxReductionsInFlight units' flattened gradients exist at once: the
  // oldest reduction is finished (and its buffer dropped) before a new one
  // starts, so the gradient buffers never add up to a full-size copy.
  constexpr size_t kMaxReductionsInFlight = 2;
  while (next_launch_ < launch_order_.size() && ready_[launch_order_[next_launch_]]) {
    if (next_launch_ >= kMaxReductionsInFlight) {
      units_[launch_order_[next_launch_ - kMaxReductionsInFlight]]->finish_reduce();
    }
    units_[launch_order_[next_launch_]]->launch_reduce(*group_, config_.reduce_scatter);
    ++next_launch_;
  }
}

void ZeroDataParallel::finalize_backward() {
  if (!in_backward_) return;
  std::string missing;
  for (size_t u = 0; u < units_.size() && missing.empty(); ++u) {
    if (!ready_[u]) {
      for (size_t i = 0; i < units_[u]->params().size(); ++i) {
        if (!units_[u]->params()[i].grad().defined()) missing = units_[u]->names()[i];
      }
      if (missing.empty()) missing = units_[u]->names()[0];
    }
  }
  try {
    TS_CHECK_T(ConfigError, missing.empty(), "ZeRO: parameter '", missing, "' got no gradient in "
               "this backward pass; every trainable parameter must take part in the loss "
               "(freeze it with requires_grad(false) otherwise)");
    launch_ready_in_order();
    for (auto& u : units_) u->finish_reduce();
  } catch (...) {
    for (auto& u : units_) {
      try {
        u->finish_reduce();
      } catch (...) {
      }
    }
    for (size_t m = 0; m < modules_.size(); ++m) release_module(m);
    reset_backward();
    throw;
  }
  for (size_t m = 0; m < modules_.size(); ++m) release_module(m);
  if (!order_learned_) {
    // From now on units are reduced in the order their gradients became ready,
    // rank 0's order on every rank, so the collectives match.
    auto order = at::empty({static_cast<int64_t>(observed_order_.size())}, at::kLong);
    for (size_t k = 0; k < observed_order_.size(); ++k) order[k] = static_cast<int64_t>(observed_order_[k]);
    group_->broadcast(order, 0)->wait();
    for (size_t k = 0; k < observed_order_.size(); ++k) launch_order_[k] = order[k].item<int64_t>();
    order_learned_ = true;
  }
  if (!forward_order_known_ && !forward_seen_.empty()) {
    forward_order_ = forward_seen_;
    forward_order_known_ = true;
  }
  reset_backward();
}

double ZeroDataParallel::clip_grad_norm(double max_norm) {
  std::vector<at::Tensor> shards;
  for (auto& u : units_) shards.push_back(u->grad_shard());
  auto sq = at::full({1}, squared_norm(shards), at::kDouble);
  group_->all_reduce(sq, comm::ReduceOp::kSum)->wait();
  const double norm = std::sqrt(sq.item<double>());
  clip_to_norm(shards, norm, max_norm);
  return norm;
}

void ZeroDataParallel::after_step() {
  for (auto& u : units_) {
    if (u->stage() != 3) u->launch_gather(*group_);
  }
  for (auto& u : units_) u->finish_gather();
  zero_grad();
}

void ZeroDataParallel::zero_grad() {
  for (auto& u : units_) u->zero_grad();
}

// --- stage 3 -------------------------------------------------------------------

void ZeroDataParallel::gather_all() {
  for (size_t m = 0; m < modules_.size(); ++m) gather_module(m, /*wait=*/false);
  for (size_t m = 0; m < modules_.size(); ++m) gather_module(m, /*wait=*/true);
  pinned_ = true;
}

void ZeroDataParallel::after_shards_loaded() {
  std::vector<FlatUnit*> refresh;
  for (auto& u : units_) {
    if (u->stage() != 3) {
      refresh.push_back(u.get());
    } else if (u->is_gathered()) {
      u->finish_gather();
      u->release();
      refresh.push_back(u.get());
    }
  }
  for (FlatUnit* u : refresh) u->launch_gather(*group_);
  for (FlatUnit* u : refresh) u->finish_gather();
}

void ZeroDataParallel::release_all() {
  pinned_ = false;
  for (size_t m = 0; m < modules_.size(); ++m) release_module(m);
}

void ZeroDataParallel::gather_module(size_t m, bool wait) {
  for (size_t f : modules_[m].flat_units) {
    FlatUnit& u = *units_[f];
    if (!u.is_gathered()) u.launch_gather(*group_);
    if (wait) u.finish_gather();
  }
}

void ZeroDataParallel::release_module(size_t m) {
  if (pinned_) return;
  for (size_t f : modules_[m].flat_units) {
    FlatUnit& u = *units_[f];
    u.finish_gather();
    if (u.is_gathered()) u.release();
  }
}

int64_t ZeroDataParallel::live_gathered_numel() const {
  int64_t n = 0;
  for (const auto& m : modules_) {
    if (units_[m.flat_units[0]]->is_gathered()) n += m.numel;
  }
  return n;
}

void ZeroDataParallel::prefetch(size_t m) {
  if (units_[modules_[m].flat_units[0]]->is_gathered()) return;
  if (modules_[m].numel > config_.stage3_prefetch_bucket_size) return;
  if (live_gathered_numel() + modules_[m].numel > config_.stage3_max_live_parameters) return;
  gather_module(m, /*wait=*/false);
}

void ZeroDataParallel::set_shard_store(ShardStore* store) {
  store_ = store;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u]->stage() == 3) units_[u]->bind_shard_store(store, u);
  }
}

void ZeroDataParallel::read_ahead(size_t pos, int direction) {
  if (!store_) return;
  // The next module is being gathered already (prefetch); read the two after it.
  constexpr int kDepth = 2;
  for (int k = 2; k <= 1 + kDepth; ++k) {
    const int64_t q = static_cast<int64_t>(pos) + direction * k;
    if (q < 0 || q >= static_cast<int64_t>(forward_order_.size())) return;
    for (size_t f : modules_[forward_order_[static_cast<size_t>(q)]].flat_units) {
      store_->prefetch(f);
    }
  }
}

void ZeroDataParallel::before_forward(size_t m) {
  if (pinned_) return;
  if (!forward_order_known_ && at::GradMode::is_enabled()) forward_seen_.push_back(m);
  gather_module(m, /*wait=*/true);
  if (!forward_order_known_) return;
  auto it = std::find(forward_order_.begin(), forward_order_.end(), m);
  if (it != forward_order_.end() && it + 1 != forward_order_.end()) prefetch(*(it + 1));
  if (it != forward_order_.end()) read_ahead(static_cast<size_t>(it - forward_order_.begin()), 1);
}

void ZeroDataParallel::after_forward(size_t m) { release_module(m); }

void ZeroDataParallel::before_backward(size_t m) {
  if (pinned_) return;
  gather_module(m, /*wait=*/true);
  if (!forward_order_known_) return;
  auto it = std::find(forward_order_.begin(), forward_order_.end(), m);
  if (it != forward_order_.end() && it != forward_order_.begin()) prefetch(*(it - 1));
  if (it != forward_order_.end()) read_ahead(static_cast<size_t>(it - forward_order_.begin()), -1);
}

// --- memory --------------------------------------------------------------------

int64_t ZeroDataParallel::param_bytes() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u->param_bytes();
  return n;
}

int64_t ZeroDataParallel::grad_bytes() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u->grad_bytes();
  return n;
}

int64_t ZeroDataParallel::buffer_bytes() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u->buffer_bytes();
  return n;
}

}  // namespace tessera::runtime::zero
