#include "tessera/parallel/sync_batch_norm.h"

#include <vector>

#include "tessera/core/check.h"

namespace tessera::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

// The group travels through the graph as an integer (AutogradContext stores
// IValues); it outlives the graph (see the header).
comm::ProcessGroup& group_of(int64_t handle) { return *reinterpret_cast<comm::ProcessGroup*>(handle); }

// Every dimension but the channel one (1).
std::vector<int64_t> reduce_dims(const torch::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel [C] vector shaped to broadcast against x [N, C, ...].
torch::Tensor per_channel(const torch::Tensor& v, const torch::Tensor& x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = v.size(0);
  return v.view(shape);
}

torch::Tensor summed(torch::Tensor t, comm::ProcessGroup& g) {
  if (g.size() > 1) g.all_reduce(t, comm::ReduceOp::kSum)->wait();
  return t;
}

struct SyncBatchNormFunction : Function<SyncBatchNormFunction> {
  // Returns y; mean and var (biased, float64) come back through `stats` for the
  // running averages.
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight,
                               torch::Tensor bias, double eps, int64_t group,
                               torch::Tensor stats) {
    const int64_t C = x.size(1);
    const auto dims = reduce_dims(x);
    // One all_reduce of [sum; sum of squares; count], accumulated in float64.
    auto packed = torch::cat({x.sum(dims, false, torch::kDouble), (x * x).sum(dims, false, torch::kDouble),
                              torch::full({1}, static_cast<double>(x.numel() / std::max<int64_t>(C, 1)),
                                          torch::kDouble)});
    packed = summed(packed, group_of(group));
    const double count = packed[2 * C].item<double>();
    TS_CHECK(count > 0, "SyncBatchNorm: the batch is empty on every rank");
    auto mean = packed.narrow(0, 0, C) / count;
    auto var = (packed.narrow(0, C, C) / count - mean * mean).clamp_min(0);
    auto invstd = (var + eps).rsqrt();
    stats.narrow(0, 0, C).copy_(mean);
    stats.narrow(0, C, C).copy_(var);
    stats[2 * C].fill_(count);
    const auto m = per_channel(mean.to(x.scalar_type()), x);
    auto scale = invstd.to(x.scalar_type());
    if (weight.defined()) scale = scale * weight;
    auto y = (x - m) * per_channel(scale, x);
    if (bias.defined()) y = y + per_channel(bias, x);
    ctx->save_for_backward({x, weight, mean, invstd});
    ctx->saved_data["group"] = group;
    ctx->saved_data["count"] = count;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    const auto& mean = saved[2];    // float64 [C]
    const auto& invstd = saved[3];  // float64 [C]
    const double count = ctx->saved_data["count"].toDouble();
    const auto& dy = grads[0];
    const int64_t C = x.size(1);
    const auto dims = reduce_dims(x);
    const auto xmu = x - per_channel(mean.to(x.scalar_type()), x);
    // This rank's sums: the weight and bias gradients are local (DDP averages them).
    auto local = torch::cat({dy.sum(dims, false, torch::kDouble),
                             (dy * xmu).sum(dims, false, torch::kDouble)});
    torch::Tensor grad_weight, grad_bias;
    if (weight.defined()) {
      grad_weight = (local.narrow(0, C, C) * invstd).to(weight.scalar_type());
      grad_bias = local.narrow(0, 0, C).to(weight.scalar_type());
    }
    // The input gradient needs the sums over the whole batch.
    const auto global = summed(local.clone(), group_of(ctx->saved_data["group"].toInt())) / count;
    const auto mean_dy = global.narrow(0, 0, C);
    const auto mean_dy_xmu = global.narrow(0, C, C);
    auto scale = invstd;
    if (weight.defined()) scale = scale * weight.to(torch::kDouble);
    const auto t = x.scalar_type();
    auto dx = (dy - per_channel(mean_dy.to(t), x) -
               xmu * per_channel((invstd * invstd * mean_dy_xmu).to(t), x)) *
              per_channel(scale.to(t), x);
    return {dx, grad_weight, grad_bias, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(SyncBatchNormOptions options,
                                     std::shared_ptr<comm::ProcessGroup> group)
    : options_(options), group_(std::move(group)) {
  TS_CHECK_T(ConfigError, group_ != nullptr, "SyncBatchNorm needs a process group");
  TS_CHECK_T(ConfigError, options_.num_features > 0, "SyncBatchNorm: num_features must be "
             "positive, got ", options_.num_features);
  const int64_t C = options_.num_features;
  if (options_.affine) {
    weight = register_parameter("weight", torch::ones({C}));
    bias = register_parameter("bias", torch::zeros({C}));
  }
  if (options_.track_running_stats) {
    running_mean = register_buffer("running_mean", torch::zeros({C}));
    running_var = register_buffer("running_var", torch::ones({C}));
    num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  }
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& x) {
  const int64_t C = options_.num_features;
  TS_CHECK(x.dim() >= 2 && x.size(1) == C, "SyncBatchNorm: expected an input [N, ", C,
           ", ...], got ", x.sizes());
  const bool batch_stats = is_training() || !options_.track_running_stats;
  if (!batch_stats) {
    return torch::batch_norm(x, weight, bias, running_mean, running_var, /*training=*/false, 0.0,
                             options_.eps, /*cudnn_enabled=*/false);
  }
  auto stats = torch::empty({2 * C + 1}, torch::kDouble);
  auto y = SyncBatchNormFunction::apply(x, weight, bias, options_.eps,
                                        reinterpret_cast<int64_t>(group_.get()), stats);
  if (is_training() && options_.track_running_stats) {
    torch::NoGradGuard no_grad;
    num_batches_tracked += 1;
    const double factor = options_.momentum
                              ? *options_.momentum
                              : 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
    const double count = stats[2 * C].item<double>();
    const auto mean = stats.narrow(0, 0, C).to(running_mean.scalar_type());
    // The running variance is the unbiased one, as BatchNorm keeps it.
    const auto var = (stats.narrow(0, C, C) * (count / std::max(count - 1, 1.0)))
                         .to(running_var.scalar_type());
    running_mean.mul_(1 - factor).add_(mean, factor);
    running_var.mul_(1 - factor).add_(var, factor);
  }
  return y;
}

namespace {

// The options of a LibTorch BatchNorm, whatever its dimension.
template <typename Impl>
bool as_sync(torch::nn::Module& m, const std::shared_ptr<comm::ProcessGroup>& group,
             std::shared_ptr<SyncBatchNormImpl>* out) {
  auto* bn = dynamic_cast<Impl*>(&m);
  if (!bn) return false;
  const auto& o = bn->options;
  SyncBatchNormOptions so;
  so.num_features = o.num_features();
  so.eps = o.eps();
  so.momentum = o.momentum().has_value() ? std::optional<double>(*o.momentum()) : std::nullopt;
  so.affine = o.affine();
  so.track_running_stats = o.track_running_stats();
  auto sync = std::make_shared<SyncBatchNormImpl>(so, group);
  torch::NoGradGuard no_grad;
  if (so.affine) {
    sync->weight.copy_(bn->weight);
    sync->bias.copy_(bn->bias);
  }
  if (so.track_running_stats) {
    sync->running_mean.copy_(bn->running_mean);
    sync->running_var.copy_(bn->running_var);
    sync->num_batches_tracked.copy_(bn->num_batches_tracked);
  }
  sync->train(bn->is_training());
  *out = sync;
  return true;
}

std::shared_ptr<SyncBatchNormImpl> to_sync(torch::nn::Module& m,
                                           const std::shared_ptr<comm::ProcessGroup>& group) {
  std::shared_ptr<SyncBatchNormImpl> out;
  if (as_sync<torch::nn::BatchNorm1dImpl>(m, group, &out) ||
      as_sync<torch::nn::BatchNorm2dImpl>(m, group, &out) ||
      as_sync<torch::nn::BatchNorm3dImpl>(m, group, &out)) {
    return out;
  }
  return nullptr;
}

int visit(torch::nn::Module& m, const std::string& path,
          const std::shared_ptr<comm::ProcessGroup>& group) {
  int converted = 0;
  auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(&m);
  decltype(seq->begin()) it{};
  if (seq) it = seq->begin();
  for (auto& child : m.named_children()) {
    const std::string child_path = path.empty() ? child.key() : path + "." + child.key();
    auto sync = to_sync(*child.value(), group);
    if (sync) {
      TS_CHECK_T(ConfigError, seq != nullptr, "convert_sync_batchnorm: '", child_path, "' (",
                 child.value()->name(), ") is held by its parent directly, not by a "
                 "torch::nn::Sequential, so calls to it cannot be rerouted; put it in a "
                 "Sequential or build the model with tessera::nn::SyncBatchNorm");
      *it = torch::nn::AnyModule(SyncBatchNorm(sync));
      m.replace_module(child.key(), sync);
      ++converted;
    } else {
      converted += visit(*child.value(), child_path, group);
    }
    if (seq) ++it;
  }
  return converted;
}

}  // namespace

int convert_sync_batchnorm(torch::nn::Module& module, std::shared_ptr<comm::ProcessGroup> group) {
  TS_CHECK_T(ConfigError, group != nullptr, "convert_sync_batchnorm needs a process group");
  return visit(module, "", group);
}

}  // namespace tessera::parallel
