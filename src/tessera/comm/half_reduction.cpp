#include "tessera/comm/half_reduction.h"

#include <ATen/ATen.h>

#include "tessera/core/check.h"

namespace tessera::comm {
namespace {

// The `size` copies of this rank's slice, one row each, combined in float32.
at::Tensor combine_rows(const at::Tensor& rows, ReduceOp op) {
  at::Tensor wide = rows.to(at::kFloat);
  switch (op) {
    case ReduceOp::kSum: return wide.sum(0);
    case ReduceOp::kProduct: return wide.prod(0);
    case ReduceOp::kMin: return std::get<0>(wide.min(0));
    case ReduceOp::kMax: return std::get<0>(wide.max(0));
    case ReduceOp::kAvg: break;
  }
  TS_THROW(CommError, "half reduction: op ", to_string(op),
           " must be turned into a sum and a divisor by the caller");
}

}  // namespace

void half_reduce_scatter(Backend& backend, const at::Tensor& input, at::Tensor& output,
                         const std::vector<int64_t>& counts, ReduceOp op, double divisor) {
  const int size = backend.size();
  const int64_t mine = counts[backend.rank()];
  at::Tensor received = at::empty({mine * size}, input.options());
  backend.all_to_all(input, received, counts, std::vector<int64_t>(size, mine));
  at::Tensor combined = combine_rows(received.view({size, mine}), op);
  if (divisor != 1.0) combined.div_(divisor);
  output.copy_(combined);  // the one rounding to 16 bits
}

void half_all_reduce(Backend& backend, at::Tensor& data, ReduceOp op, double divisor,
                     const std::vector<int64_t>& counts) {
  at::Tensor mine = at::empty({counts[backend.rank()]}, data.options());
  half_reduce_scatter(backend, data, mine, counts, op, divisor);
  backend.all_gather(mine, data, counts);
}

}  // namespace tessera::comm
