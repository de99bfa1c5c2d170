#include "tessera/parallel/tensor/tp_ops.h"

#include <cstdint>

#include "tessera/core/check.h"
#include "tessera/parallel/group_handle.h"

namespace tessera::parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

constexpr int64_t kSequenceDim = 1;

int64_t as_handle(comm::ProcessGroup& g) { return group_handle(g); }
comm::ProcessGroup& from_handle(AutogradContext* ctx) {
  return group_from_handle(ctx->saved_data["group"].toInt());
}

int64_t checked_dim(const torch::Tensor& x, int64_t dim) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  TS_CHECK(d >= 0 && d < x.dim(), "tensor parallel: dimension ", dim, " is outside a ", x.dim(),
           "-d tensor");
  return d;
}

torch::Tensor all_reduced(const torch::Tensor& x, comm::ProcessGroup& g) {
  if (g.size() == 1) return x;
  auto out = x.contiguous().clone();
  g.all_reduce(out)->wait();
  return out;
}

struct CopyToTp : Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_reduced(g[0], from_handle(ctx)), torch::Tensor()};
  }
};

struct ReduceFromTp : Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t group) {
    return all_reduced(x, group_from_handle(group));
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], torch::Tensor()}; }
};

// dim-parameterised scatter/gather pairs: forward op `F`, backward its conjugate.
enum class Move { kSlice, kGather, kReduceScatter };

torch::Tensor apply(Move m, const torch::Tensor& x, int64_t dim, comm::ProcessGroup& g) {
  switch (m) {
    case Move::kSlice: return slice_along(x, dim, g);
    case Move::kGather: return all_gather_along(x, dim, g);
    case Move::kReduceScatter: return reduce_scatter_along(x, dim, g);
  }
  return x;
}

template <Move F, Move B>
struct Along : Function<Along<F, B>> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t dim, int64_t group) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["dim"] = dim;
    return apply(F, x, dim, group_from_handle(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {apply(B, g[0], ctx->saved_data["dim"].toInt(), from_handle(ctx)), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor all_gather_along(const torch::Tensor& x, int64_t dim, comm::ProcessGroup& g) {
  if (g.size() == 1) return x;
  const int64_t d = checked_dim(x, dim);
  auto in = x.contiguous();
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < g.size(); ++r) parts.push_back(torch::empty_like(in));
  g.all_gather(parts, in)->wait();
  return torch::cat(parts, d);
}

torch::Tensor slice_along(const torch::Tensor& x, int64_t dim, comm::ProcessGroup& g) {
  if (g.size() == 1) return x;
  const int64_t d = checked_dim(x, dim);
  TS_CHECK(x.size(d) % g.size() == 0, "tensor parallel: dimension ", d, " of size ", x.size(d),
           " does not split evenly over ", g.size(), " ranks");
  return x.chunk(g.size(), d)[static_cast<size_t>(g.rank())].contiguous();
}

torch::Tensor reduce_scatter_along(const torch::Tensor& x, int64_t dim, comm::ProcessGroup& g) {
  if (g.size() == 1) return x;
  const int64_t d = checked_dim(x, dim);
  TS_CHECK(x.size(d) % g.size() == 0, "tensor parallel: dimension ", d, " of size ", x.size(d),
           " does not split evenly over ", g.size(), " ranks");
  // reduce_scatter splits the flat tensor in rank order: move `dim` to the front
  // so each rank's slice is one contiguous run.
  auto front = x.movedim(d, 0).contiguous();
  auto sizes = front.sizes().vec();
  sizes[0] /= g.size();
  auto out = torch::empty(sizes, front.options());
  g.reduce_scatter(out, front)->wait();
  return out.movedim(0, d).contiguous();
}

torch::Tensor copy_to_tp(const torch::Tensor& x, comm::ProcessGroup& g) {
  return g.size() == 1 ? x : CopyToTp::apply(x, as_handle(g));
}
torch::Tensor reduce_from_tp(const torch::Tensor& x, comm::ProcessGroup& g) {
  return g.size() == 1 ? x : ReduceFromTp::apply(x, as_handle(g));
}
torch::Tensor scatter_to_tp(const torch::Tensor& x, comm::ProcessGroup& g) {
  return g.size() == 1 ? x : Along<Move::kSlice, Move::kGather>::apply(x, -1, as_handle(g));
}
torch::Tensor gather_from_tp(const torch::Tensor& x, comm::ProcessGroup& g) {
  return g.size() == 1 ? x : Along<Move::kGather, Move::kSlice>::apply(x, -1, as_handle(g));
}
torch::Tensor scatter_to_sequence(const torch::Tensor& x, comm::ProcessGroup& g) {
  return g.size() == 1 ? x
                       : Along<Move::kSlice, Move::kGather>::apply(x, kSequenceDim, as_handle(g));
}
torch::Tensor gather_from_sequence(const torch::Tensor& x, comm::ProcessGroup& g) {
  return g.size() == 1
             ? x
             : Along<Move::kGather, Move::kReduceScatter>::apply(x, kSequenceDim, as_handle(g));
}
torch::Tensor reduce_scatter_to_sequence(const torch::Tensor& x, comm::ProcessGroup& g) {
  return g.size() == 1
             ? x
             : Along<Move::kReduceScatter, Move::kGather>::apply(x, kSequenceDim, as_handle(g));
}

}  // namespace tessera::parallel
