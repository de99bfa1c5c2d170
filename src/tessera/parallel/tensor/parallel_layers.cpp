#include "tessera/parallel/tensor/parallel_layers.h"

#include "tessera/core/check.h"
#include "tessera/models/low_precision.h"
#include "tessera/parallel/tensor/tp_ops.h"

namespace tessera::parallel {

namespace {

comm::ProcessGroup& group_of(const TensorParallelOptions& tp) {
  TS_CHECK_T(ConfigError, tp.group != nullptr, "tensor-parallel layer built without a group");
  return *tp.group;
}

void check_divides(const char* layer, const char* what, int64_t n, int tp) {
  TS_CHECK_T(ConfigError, n % tp == 0, layer, ": ", what, " ", n,
             " does not divide by tensor_model_parallel_size ", tp,
             "; choose a tensor-parallel size that divides it");
}

void check_shape(const char* layer, const char* what, const torch::Tensor& t,
                 torch::IntArrayRef want) {
  TS_CHECK_T(ConfigError, t.sizes() == want, layer, ": dense ", what, " has shape ", t.sizes(),
             ", expected ", want);
}

}  // namespace

namespace {
// N(0, 0.02), or uninitialized memory when the caller will overwrite it.
torch::Tensor starting_weight(at::IntArrayRef shape, const TensorParallelOptions& tp) {
  return tp.draw_weights ? torch::randn(shape) * 0.02 : torch::empty(shape);
}
}  // namespace

torch::Tensor dense_slice(const torch::Tensor& dense, DenseSlice slice, int rank, int size,
                          int ep_rank, int ep_size) {
  const auto r = static_cast<size_t>(rank);
  const torch::Tensor mine =
      slice.experts ? dense.chunk(ep_size, 0)[static_cast<size_t>(ep_rank)] : dense;
  const int64_t dim = slice.tp_dim();
  switch (slice.kind) {
    case DenseSlice::Kind::kWhole:
      return mine;
    case DenseSlice::Kind::kColumns:
      return mine.chunk(size, dim)[r];
    case DenseSlice::Kind::kRows:
      break;
  }
  if (slice.blocks == 1) return mine.chunk(size, dim)[r];
  std::vector<torch::Tensor> parts;
  for (const auto& block : mine.chunk(slice.blocks, dim)) parts.push_back(block.chunk(size, dim)[r]);
  return torch::cat(parts, dim);
}

std::vector<int64_t> dense_shape(at::IntArrayRef local, DenseSlice slice, int size, int ep_size) {
  auto shape = local.vec();
  if (slice.experts) shape[0] *= ep_size;
  if (slice.kind != DenseSlice::Kind::kWhole) shape[static_cast<size_t>(slice.tp_dim())] *= size;
  return shape;
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, TensorParallelOptions tp,
                                                   bool bias, bool gather_output)
    : tp_(std::move(tp)), in_(in), out_(out), gather_output_(gather_output) {
  const int size = group_of(tp_).size();
  check_divides("ColumnParallelLinear", "output size", out, size);
  weight = register_parameter("weight", starting_weight({out / size, in}, tp_));
  if (bias) this->bias = register_parameter("bias", torch::zeros({out / size}));
}

void ColumnParallelLinearImpl::from_dense(const torch::Tensor& w, const torch::Tensor& b,
                                          int64_t row_blocks) {
  comm::ProcessGroup& g = group_of(tp_);
  check_shape("ColumnParallelLinear", "weight", w, {out_, in_});
  TS_CHECK_T(ConfigError, row_blocks >= 1 && out_ % (row_blocks * g.size()) == 0,
             "ColumnParallelLinear: output size ", out_, " does not split into ", row_blocks,
             " blocks of tensor_model_parallel_size ", g.size(), " parts");
  const DenseSlice rows{DenseSlice::Kind::kRows, row_blocks};
  torch::NoGradGuard no_grad;
  weight.copy_(dense_slice(w, rows, g.rank(), g.size()));
  if (bias.defined()) {
    check_shape("ColumnParallelLinear", "bias", b, {out_});
    bias.copy_(dense_slice(b, rows, g.rank(), g.size()));
  }
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  comm::ProcessGroup& g = group_of(tp_);
  const auto in = tp_.sequence_parallel ? gather_from_sequence(x, g) : copy_to_tp(x, g);
  auto y = models::linear_lowp(in, weight, bias);  // plain linear on float32 inputs
  return gather_output_ ? gather_from_tp(y, g) : y;
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in, int64_t out, TensorParallelOptions tp,
                                             bool bias, bool input_is_parallel)
    : tp_(std::move(tp)), in_(in), out_(out), input_is_parallel_(input_is_parallel) {
  const int size = group_of(tp_).size();
  check_divides("RowParallelLinear", "input size", in, size);
  TS_CHECK_T(ConfigError, input_is_parallel || !tp_.sequence_parallel,
             "RowParallelLinear: sequence_parallel needs input_is_parallel");
  weight = register_parameter("weight", starting_weight({out, in / size}, tp_));
  if (bias) this->bias = register_parameter("bias", torch::zeros({out}));
}

void RowParallelLinearImpl::from_dense(const torch::Tensor& w, const torch::Tensor& b) {
  comm::ProcessGroup& g = group_of(tp_);
  check_shape("RowParallelLinear", "weight", w, {out_, in_});
  torch::NoGradGuard no_grad;
  weight.copy_(dense_slice(w, {DenseSlice::Kind::kColumns}, g.rank(), g.size()));
  if (bias.defined()) {
    check_shape("RowParallelLinear", "bias", b, {out_});
    bias.copy_(b);
  }
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  comm::ProcessGroup& g = group_of(tp_);
  const auto in = input_is_parallel_ ? x : scatter_to_tp(x, g);
  auto partial = models::linear_lowp(in, weight);
  // A float32 bias on 16-bit activations: added in float32, rounded back.
  auto add_bias = [](const torch::Tensor& y, const torch::Tensor& b) {
    if (y.scalar_type() == b.scalar_type()) return y + b;
    return (y.to(b.scalar_type()) + b).to(y.scalar_type());
  };
  if (tp_.sequence_parallel) {
    auto y = reduce_scatter_to_sequence(partial, g);
    // Each rank adds the bias to its part of the sequence only.
    return bias.defined() ? add_bias(y, copy_to_tp(bias, g)) : y;
  }
  auto y = reduce_from_tp(partial, g);
  return bias.defined() ? add_bias(y, bias) : y;
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab, int64_t dim,
                                                       TensorParallelOptions tp)
    : tp_(std::move(tp)), vocab_(vocab) {
  comm::ProcessGroup& g = group_of(tp_);
  check_divides("VocabParallelEmbedding", "vocab_size", vocab, g.size());
  const int64_t per = vocab / g.size();
  begin_ = per * g.rank();
  end_ = begin_ + per;
  weight = register_parameter("weight", starting_weight({per, dim}, tp_));
}

void VocabParallelEmbeddingImpl::from_dense(const torch::Tensor& w) {
  check_shape("VocabParallelEmbedding", "weight", w, {vocab_, weight.size(1)});
  torch::NoGradGuard no_grad;
  weight.copy_(w.slice(0, begin_, end_));
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& ids) {
  comm::ProcessGroup& g = group_of(tp_);
  const auto outside = (ids < begin_).logical_or(ids >= end_);
  const auto local = (ids - begin_).masked_fill(outside, 0);
  auto rows = torch::embedding(weight, local).masked_fill(outside.unsqueeze(-1), 0.0);
  return tp_.sequence_parallel ? reduce_scatter_to_sequence(rows, g) : reduce_from_tp(rows, g);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor logits, torch::Tensor targets,
                               int64_t group) {
    auto& g = *reinterpret_cast<comm::ProcessGroup*>(group);
    const int64_t per = logits.size(1);
    const int64_t begin = per * g.rank();
    // Stable softmax: subtract the global row max.
    auto max = std::get<0>(logits.max(1)).contiguous();
    if (g.size() > 1) g.all_reduce(max, comm::ReduceOp::kMax)->wait();
    auto shifted = logits - max.unsqueeze(1);
    auto exp = shifted.exp();
    auto sum = exp.sum(1).contiguous();
    const auto outside = (targets < begin).logical_or(targets >= begin + per);
    const auto local = (targets - begin).masked_fill(outside, 0);
    auto target_logit =
        shifted.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill(outside, 0.0).contiguous();
    if (g.size() > 1) {
      g.all_reduce(sum)->wait();
      g.all_reduce(target_logit)->wait();
    }
    auto softmax = exp / sum.unsqueeze(1);
    ctx->save_for_backward({softmax, local, outside});
    return (sum.log() - target_logit).mean();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto saved = ctx->get_saved_variables();
    auto softmax = saved[0], local = saved[1], outside = saved[2];
    auto one_hot = torch::zeros_like(softmax);
    one_hot.scatter_(1, local.unsqueeze(1), (~outside).to(softmax.dtype()).unsqueeze(1));
    auto g = (softmax - one_hot) * (grad[0] / static_cast<double>(softmax.size(0)));
    return {g, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& local_logits,
                                           const torch::Tensor& targets, comm::ProcessGroup& group) {
  TS_CHECK(local_logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == local_logits.size(0),
           "vocab_parallel_cross_entropy: logits must be [N, V/tp] and targets [N], got ",
           local_logits.sizes(), " and ", targets.sizes());
  // One rank holds the whole vocabulary: LibTorch's fused loss is the same math.
  if (group.size() == 1) return torch::nn::functional::cross_entropy(local_logits, targets);
  return VocabParallelCrossEntropy::apply(local_logits, targets,
                                          reinterpret_cast<int64_t>(&group));
}

}  // namespace tessera::parallel
