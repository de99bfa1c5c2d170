#include "tessera/runtime/ddp/reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <unordered_set>

#include "tessera/core/check.h"

namespace tessera::runtime::ddp {
namespace {

using torch::autograd::variable_list;

// Post hook on a gradient accumulator. Holds a pointer cell the reducer clears on
// destruction, because the accumulator (and this hook) can outlive the reducer.
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(std::shared_ptr<Reducer*> reducer, std::function<void(Reducer*)> fn)
      : reducer_(std::move(reducer)), fn_(std::move(fn)) {}
  variable_list operator()(const variable_list& outputs, const variable_list&) override {
    if (Reducer* r = *reducer_) fn_(r);
    return outputs;
  }

 private:
  std::shared_ptr<Reducer*> reducer_;
  std::function<void(Reducer*)> fn_;
};

}  // namespace

Reducer::Reducer(std::vector<std::string> names, std::vector<at::Tensor> params,
                 std::shared_ptr<comm::ProcessGroup> group, ReducerOptions options)
    : names_(std::move(names)),
      params_(std::move(params)),
      group_(std::move(group)),
      options_(options),
      self_(std::make_shared<Reducer*>(this)) {
  TS_INTERNAL_ASSERT(names_.size() == params_.size());
  TS_CHECK_T(ConfigError, group_ != nullptr, "DistributedDataParallel needs a process group");
  std::vector<ParamSpec> specs;
  for (size_t i = 0; i < params_.size(); ++i) {
    TS_CHECK_T(ConfigError, params_[i].requires_grad(), "parameter '", names_[i],
               "' does not require grad; the reducer only takes trainable parameters");
    specs.push_back({params_[i].numel(), params_[i].scalar_type()});
  }
  buckets_ = assign_buckets(specs, options_.bucket_cap_bytes, options_.first_bucket_cap_bytes);
  slots_.resize(params_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    auto flat = at::zeros({bucket.numel}, params_[bucket.params[0]].options().dtype(bucket.dtype)
                                              .requires_grad(false));
    int64_t offset = 0;
    for (size_t k : bucket.params) {
      Slot& s = slots_[k];
      s.bucket = b;
      s.offset = offset;
      // A tensor sharing the bucket's storage, not an autograd view of it: the
      // optimizers' zero_grad() calls detach_(), which autograd refuses on views.
      s.view = at::empty({0}, flat.options());
      s.view.set_(flat.storage(), offset, params_[k].sizes());
      // Existing gradients (e.g. from a step before wrapping) carry over.
      auto& grad = params_[k].mutable_grad();
      if (grad.defined()) s.view.copy_(grad);
      grad = s.view;
      offset += params_[k].numel();
    }
    flats_.push_back(flat);
  }
  std::vector<BucketLayout> layouts;
  for (const Bucket& bucket : buckets_) {
    BucketLayout layout;
    for (size_t k : bucket.params) {
      layout.offsets.push_back(slots_[k].offset);
      layout.shapes.push_back(params_[k].sizes().vec());
    }
    layouts.push_back(std::move(layout));
  }
  reduction_ = make_bucket_reduction(options_.comm_hook, options_.powersgd, std::move(layouts));
  accumulators_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].numel() == 0) {
      slots_[i].bucket = SIZE_MAX;
      continue;
    }
    accumulators_[i] = torch::autograd::impl::grad_accumulator(params_[i]);
    accumulators_[i]->add_post_hook(
        std::make_unique<GradReadyHook>(self_, [i](Reducer* r) { r->on_grad_ready(i); }));
  }
  reset_iteration();
}

Reducer::~Reducer() {
  *self_ = nullptr;
  reduction_->abandon();
}

void Reducer::reset_iteration() {
  pending_.assign(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].params.size();
  for (auto& s : slots_) s.ready = false;
  next_launch_ = 0;
  current_ = ReducerTimings{};
  current_.bucket_launch.assign(buckets_.size(), {});
  in_backward_ = false;
}

void Reducer::wait_launched_quietly() {
  // The error has been or will be reported by the pass that launched it.
  reduction_->abandon();
}

void Reducer::on_grad_ready(size_t index) {
  if (!sync_) return;
  const auto now = ReducerTimings::Clock::now();
  if (!in_backward_) {
    in_backward_ = true;
    current_.first_grad = now;
    // Runs when autograd has produced every gradient of this pass.
    std::shared_ptr<Reducer*> self = self_;
    torch::autograd::Engine::get_default_engine().queue_callback([self] {
      if (Reducer* r = *self) r->finalize();
    });
  }
  current_.last_grad = now;
  TS_CHECK(!slots_[index].ready, "parameter '", names_[index],
           "' received its gradient twice in one backward pass; DistributedDataParallel "
           "does not support reentrant backward or reusing a parameter across passes "
           "without a step");
  mark_ready(index);
}

void Reducer::bind_gradient(size_t index) {
  Slot& s = slots_[index];
  if (s.bucket == SIZE_MAX) return;
  at::NoGradGuard no_grad;
  auto& grad = params_[index].mutable_grad();
  // Usually grad already is the bucket view; after a set-to-none zero_grad or a
  // user assignment it is a separate tensor, copied in and re-pointed.
  if (!grad.defined()) {
    s.view.zero_();
    grad = s.view;
  } else if (!grad.is_same(s.view)) {
    if (grad.data_ptr() != s.view.data_ptr()) s.view.copy_(grad);
    grad = s.view;
  }
}

void Reducer::bind_gradients() {
  TS_CHECK(!in_backward_, "bind_gradients() during a backward pass");
  for (size_t i = 0; i < params_.size(); ++i) bind_gradient(i);
}

void Reducer::zero_grad() {
  TS_CHECK(!in_backward_, "zero_grad() during a backward pass");
  for (auto& flat : flats_) flat.zero_();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (slots_[i].bucket == SIZE_MAX) continue;
    auto& grad = params_[i].mutable_grad();
    if (!grad.is_same(slots_[i].view)) grad = slots_[i].view;
  }
}

void Reducer::mark_ready(size_t index) {
  Slot& s = slots_[index];
  if (s.bucket == SIZE_MAX || s.ready) return;
  // If the gradient was not bound before backward, this costs one copy.
  bind_gradient(index);
  s.ready = true;
  if (--pending_[s.bucket] == 0 && options_.overlap_comm) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) {
    current_.bucket_launch[next_launch_] = ReducerTimings::Clock::now();
    reduction_->launch(*group_, next_launch_, flats_[next_launch_]);
    ++next_launch_;
  }
}

void Reducer::prepare_for_backward(const std::vector<at::Tensor>& outputs) {
  if (!options_.find_unused_parameters || !sync_) return;
  std::unordered_set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  for (const auto& out : outputs) {
    if (!out.defined()) continue;
    auto fn = out.grad_fn();
    if (!fn && out.requires_grad()) fn = torch::autograd::impl::try_get_grad_accumulator(out);
    if (fn && seen.insert(fn.get()).second) stack.push_back(fn.get());
  }
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->next_edges()) {
      auto* next = edge.function.get();
      if (next && seen.insert(next).second) stack.push_back(next);
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (accumulators_[i] && !seen.count(accumulators_[i].get())) mark_ready(i);
  }
}

void Reducer::finalize() {
  current_.backward_end = ReducerTimings::Clock::now();
  std::string missing;
  size_t missing_count = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (slots_[i].ready || slots_[i].bucket == SIZE_MAX) continue;
    if (options_.find_unused_parameters) {
      mark_ready(i);
    } else {
      if (missing.empty()) missing = names_[i];
      ++missing_count;
    }
  }
  if (!missing.empty()) {
    wait_launched_quietly();
    reset_iteration();
    TS_THROW(ConfigError, "parameter '", missing, "' (and ", missing_count - 1,
             " more) got no gradient in this backward pass, so its bucket can never be "
             "reduced; construct DistributedDataParallel with find_unused_parameters=true "
             "(config: \"find_unused_parameters\": true) or make the loss depend on it");
  }
  if (!options_.overlap_comm) launch_ready_buckets();
  try {
    for (size_t b = 0; b < buckets_.size(); ++b) reduction_->finish(*group_, b, flats_[b]);
  } catch (...) {
    wait_launched_quietly();
    reset_iteration();
    throw;
  }
  current_.reduced = ReducerTimings::Clock::now();
  timings_ = current_;
  ++reductions_;
  reset_iteration();
}

}  // namespace tessera::runtime::ddp
