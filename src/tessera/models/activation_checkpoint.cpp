#include "tessera/models/activation_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <mutex>

#include "tessera/core/check.h"

namespace tessera::models {
namespace {

at::Tensor generator_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_generator_state(const at::Tensor& s) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(s);
}

at::Tensor get_rng(const CheckpointOptions& o) {
  return o.get_rng_state ? o.get_rng_state() : generator_state();
}

void set_rng(const CheckpointOptions& o, const at::Tensor& s) {
  if (o.set_rng_state) {
    o.set_rng_state(s);
  } else {
    set_generator_state(s);
  }
}

// The backward of a checkpointed segment. Its next edges are the inputs'
// and then the parameters': apply() returns a gradient for each, so the
// parameters' gradients are accumulated by the outer backward (and their hooks
// run there), not by a nested one.
class RecomputeBackward : public torch::autograd::Node {
 public:
  RecomputeBackward(CheckpointedFn fn, std::vector<at::Tensor> inputs,
                    std::vector<std::vector<int64_t>> sizes, std::vector<bool> needs_grad,
                    std::vector<at::Tensor> params, at::Tensor rng, CheckpointOptions options)
      : fn_(std::move(fn)), inputs_(std::move(inputs)), sizes_(std::move(sizes)),
        needs_grad_(std::move(needs_grad)), params_(std::move(params)), rng_(std::move(rng)),
        options_(std::move(options)) {}

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    TS_CHECK(!inputs_.empty() || !params_.empty(),
             "checkpoint_activations: the segment's backward ran twice; its inputs were freed "
             "(retain_graph is not supported for checkpointed segments)");
    std::vector<at::Tensor> in;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      at::Tensor x = options_.unpack_input ? options_.unpack_input(inputs_[i], sizes_[i])
                                           : inputs_[i];
      in.push_back(x.detach().requires_grad_(needs_grad_[i]));
    }
    const at::Tensor now = get_rng(options_);
    set_rng(options_, rng_);
    std::vector<at::Tensor> out;
    {
      at::AutoGradMode grad_mode(true);
      out = fn_(in);
    }
    set_rng(options_, now);
    TS_CHECK(out.size() == grads.size(), "checkpoint_activations: fn returned ", out.size(),
             " tensors when recomputed, ", grads.size(), " the first time");
    std::vector<at::Tensor> outs, grad_outs;
    for (size_t i = 0; i < out.size(); ++i) {
      if (grads[i].defined() && out[i].requires_grad()) {
        outs.push_back(out[i]);
        grad_outs.push_back(grads[i]);
      }
    }
    std::vector<at::Tensor> wrt;
    std::vector<size_t> slot;  // output position of each entry of wrt
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].requires_grad()) {
        wrt.push_back(in[i]);
        slot.push_back(i);
      }
    }
    for (size_t j = 0; j < params_.size(); ++j) {
      if (params_[j].requires_grad()) {
        wrt.push_back(params_[j]);
        slot.push_back(in.size() + j);
      }
    }
    torch::autograd::variable_list result(in.size() + params_.size());
    if (!outs.empty() && !wrt.empty()) {
      auto g = torch::autograd::grad(outs, wrt, grad_outs, /*retain_graph=*/false,
                                     /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t k = 0; k < g.size(); ++k) result[slot[k]] = g[k];
    }
    inputs_.clear();
    params_.clear();
    return result;
  }

  void release_variables() override {
    inputs_.clear();
    params_.clear();
  }

 private:
  CheckpointedFn fn_;
  std::vector<at::Tensor> inputs_;  // as packed
  std::vector<std::vector<int64_t>> sizes_;
  std::vector<bool> needs_grad_;
  std::vector<at::Tensor> params_;
  at::Tensor rng_;
  CheckpointOptions options_;
};

}  // namespace

std::vector<at::Tensor> checkpoint_activations(const CheckpointedFn& fn,
                                               const std::vector<at::Tensor>& inputs,
                                               const std::vector<at::Tensor>& params,
                                               const CheckpointOptions& options) {
  TS_CHECK(!options.get_rng_state == !options.set_rng_state &&
               !options.pack_input == !options.unpack_input,
           "checkpoint_activations: set both or neither of get/set_rng_state and of "
           "pack/unpack_input");
  if (!at::GradMode::is_enabled()) return fn(inputs);
  const at::Tensor rng = get_rng(options);
  std::vector<at::Tensor> out;
  {
    at::NoGradGuard no_grad;
    out = fn(inputs);
  }
  bool needed = false;
  for (const auto& x : inputs) needed = needed || x.requires_grad();
  for (const auto& p : params) needed = needed || p.requires_grad();
  if (!needed) return out;
  // Detached copies (or what pack_input keeps) hold the values without the
  // graph that produced them.
  std::vector<at::Tensor> kept;
  std::vector<std::vector<int64_t>> sizes;
  std::vector<bool> needs_grad;
  for (const auto& x : inputs) {
    kept.push_back(options.pack_input ? options.pack_input(x.detach()) : x.detach());
    sizes.push_back(x.sizes().vec());
    needs_grad.push_back(x.requires_grad());
  }
  auto node = std::shared_ptr<RecomputeBackward>(
      new RecomputeBackward(fn, std::move(kept), std::move(sizes), std::move(needs_grad), params,
                            rng, options),
      torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(inputs, params));
  for (auto& o : out) {
    TS_CHECK(o.defined() && at::isFloatingType(o.scalar_type()),
             "checkpoint_activations: fn must return floating-point tensors");
    torch::autograd::set_history(o, node);
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> checkpoint_segments(int64_t n, int64_t segments) {
  TS_CHECK_T(ConfigError, segments >= 1 && segments <= n, "activation checkpointing: ", segments,
             " segments of ", n, " blocks; use 1 to ", n);
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t k = 0, begin = 0; k < segments; ++k) {
    const int64_t end = begin + n / segments + (k < n % segments ? 1 : 0);
    out.emplace_back(begin, end);
    begin = end;
  }
  return out;
}

}  // namespace tessera::models
