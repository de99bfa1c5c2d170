#include "tessera/runtime/profiling/flops_profiler.h"

#include <ATen/record_function.h>
#include <torch/nn/module.h>

#include <algorithm>

#include "tessera/core/check.h"
#include "tessera/runtime/profiling/op_flops.h"
#include "tessera/runtime/profiling/profile_format.h"

namespace tessera::runtime::profiling {

struct FlopsProfiler::Node {
  std::string name, type;
  int depth = 0;
  int64_t params = 0;  // recursive
  std::vector<size_t> children;
  bool marked = false;       // its forward opened a ModuleScope
  double scope_seconds = 0;  // wall time of those forwards
  double op_seconds = 0;     // outermost operators that belong to it
  double self_flops = 0;
};

namespace {

using Clock = std::chrono::steady_clock;

// The profiler of this thread, for the RecordFunction callbacks (plain function
// pointers, no closure).
thread_local FlopsProfiler* t_profiler = nullptr;

struct OpFrame : at::ObserverContext {
  Clock::time_point start;
  size_t owner = 0;  // node the operator belongs to
  bool outermost = false;
  bool counted = false;
  double flops = 0;
};

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  return t_profiler != nullptr ? t_profiler->op_start(fn) : nullptr;
}

void on_op_end(const at::RecordFunction&, at::ObserverContext* ctx) {
  if (t_profiler != nullptr && ctx != nullptr) t_profiler->op_end(ctx);
}

// "tessera::models::CausalSelfAttentionImpl" -> "CausalSelfAttention".
std::string short_type(const std::string& name) {
  std::string s = name.substr(name.rfind("::") == std::string::npos ? 0 : name.rfind("::") + 2);
  if (s.size() > 4 && s.compare(s.size() - 4, 4, "Impl") == 0) s.resize(s.size() - 4);
  return s;
}

}  // namespace

FlopsProfiler::FlopsProfiler() = default;

FlopsProfiler::~FlopsProfiler() { stop(); }

void FlopsProfiler::start() {
  TS_CHECK(!started_, "FlopsProfiler::start: already started");
  TS_CHECK(t_profiler == nullptr, "FlopsProfiler::start: another profiler runs on this thread");
  started_ = true;
  t_profiler = this;
  previous_observer_ = models::set_module_scope_observer(this);
  // Inputs are needed for the shapes and the parameters; only FUNCTION scope:
  // user scopes and backward nodes are not operators of the forward.
  callback_handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(on_op_start, on_op_end)
                                                    .needsInputs(true)
                                                    .scopes({at::RecordScope::FUNCTION}));
}

void FlopsProfiler::stop() {
  if (!started_) return;
  at::removeCallback(callback_handle_);
  models::set_module_scope_observer(previous_observer_);
  t_profiler = nullptr;
  started_ = false;
  capturing_ = false;
}

void FlopsProfiler::index_root(const torch::nn::Module* root) {
  nodes_.clear();
  // Depth-first in registration order, so that parents come before children.
  struct Item {
    const torch::nn::Module* module;
    std::string name;
    int depth;
    size_t parent;
  };
  std::vector<Item> stack{{root, "", 0, SIZE_MAX}};
  while (!stack.empty()) {
    Item item = stack.back();
    stack.pop_back();
    const size_t id = nodes_.size();
    Node node;
    node.name = item.name;
    node.type = short_type(item.module->name());
    node.depth = item.depth;
    for (const auto& p : item.module->parameters(/*recurse=*/true)) node.params += p.numel();
    for (const auto& p : item.module->named_parameters(/*recurse=*/false)) {
      // By storage, so that views (the weight.t() of a C++ Linear) find it too; a
      // tied weight belongs to its first owner.
      const at::Tensor& t = p.value();
      if (t.has_storage()) node_of_param_.emplace(t.storage().unsafeGetStorageImpl(), id);
    }
    nodes_.push_back(std::move(node));
    node_of_module_[item.module] = id;
    if (item.parent != SIZE_MAX) nodes_[item.parent].children.push_back(id);
    const auto children = item.module->named_children();
    for (auto it = children.end(); it != children.begin();) {
      --it;
      const std::string name = item.name.empty() ? it->key() : item.name + "." + it->key();
      stack.push_back({it->value().get(), name, item.depth + 1, id});
    }
  }
}

void FlopsProfiler::enter(const torch::nn::Module* module) {
  if (complete_) return;
  if (!capturing_) {
    if (!scope_stack_.empty() || op_depth_ > 0) return;  // not outermost
    index_root(module);
    capturing_ = true;
  }
  auto it = node_of_module_.find(module);
  // A module outside the root's tree (built inside forward): its work is its caller's.
  const size_t id = it != node_of_module_.end() ? it->second : scope_stack_.back().first;
  nodes_[id].marked = true;
  scope_stack_.emplace_back(id, Clock::now());
}

void FlopsProfiler::exit(const torch::nn::Module*) {
  if (!capturing_ || scope_stack_.empty()) return;
  const auto [id, start] = scope_stack_.back();
  scope_stack_.pop_back();
  nodes_[id].scope_seconds += std::chrono::duration<double>(Clock::now() - start).count();
  if (scope_stack_.empty()) finish();
}

std::unique_ptr<at::ObserverContext> FlopsProfiler::op_start(const at::RecordFunction& fn) {
  if (!capturing_) return nullptr;
  auto frame = std::make_unique<OpFrame>();
  frame->outermost = op_depth_ == 0;
  frame->counted = in_counted_ == 0 && has_flops_formula(fn.name());
  ++op_depth_;
  in_counted_ += frame->counted ? 1 : 0;
  frame->owner = scope_stack_.back().first;
  if (frame->outermost || frame->counted) {
    std::vector<Shape> shapes;
    for (const c10::IValue& v : fn.inputs()) {
      if (!v.isTensor()) {
        shapes.emplace_back();
        continue;
      }
      const at::Tensor& t = v.toTensor();
      shapes.push_back(t.defined() ? t.sizes().vec() : Shape{});
      if (!t.defined() || !t.has_storage()) continue;
      auto owner = node_of_param_.find(t.storage().unsafeGetStorageImpl());
      if (owner != node_of_param_.end()) frame->owner = owner->second;
    }
    if (frame->counted) frame->flops = op_flops(fn.name(), shapes).value_or(0.0);
  }
  frame->start = Clock::now();
  return frame;
}

void FlopsProfiler::op_end(at::ObserverContext* ctx) {
  auto& frame = static_cast<OpFrame&>(*ctx);
  --op_depth_;
  in_counted_ -= frame.counted ? 1 : 0;
  if (!capturing_) return;
  Node& node = nodes_[frame.owner];
  node.self_flops += frame.flops;
  if (frame.outermost) {
    node.op_seconds += std::chrono::duration<double>(Clock::now() - frame.start).count();
  }
}

void FlopsProfiler::finish() {
  capturing_ = false;
  complete_ = true;
  modules_.assign(nodes_.size(), {});
  // Children come after their parent: a reverse sweep sums them up first.
  for (size_t i = nodes_.size(); i-- > 0;) {
    const Node& n = nodes_[i];
    ModuleProfile& m = modules_[i];
    m.name = n.name;
    m.type = n.type;
    m.depth = n.depth;
    m.params = n.params;
    double child_seconds = 0, child_flops = 0;
    for (size_t c : n.children) {
      child_seconds += modules_[c].seconds;
      child_flops += modules_[c].flops;
    }
    m.flops = n.self_flops + child_flops;
    m.self_flops = n.self_flops;
    m.seconds = n.marked ? n.scope_seconds : n.op_seconds + child_seconds;
    m.self_seconds = std::max(0.0, m.seconds - child_seconds);
  }
}

double FlopsProfiler::total_flops() const { return modules_.empty() ? 0 : modules_[0].flops; }
double FlopsProfiler::total_seconds() const { return modules_.empty() ? 0 : modules_[0].seconds; }
int64_t FlopsProfiler::total_params() const { return modules_.empty() ? 0 : modules_[0].params; }

std::string FlopsProfiler::report(const ProfileReportOptions& options) const {
  return format_profile(modules_, options);
}

}  // namespace tessera::runtime::profiling
