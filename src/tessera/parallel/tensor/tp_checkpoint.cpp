#include "tessera/parallel/tensor/tp_checkpoint.h"

#include <ATen/ATen.h>

#include "tessera/parallel/tensor/dropout_rng.h"
#include "tessera/parallel/tensor/tp_ops.h"

namespace tessera::parallel {

at::Tensor partition_activation(const at::Tensor& x, comm::ProcessGroup& group) {
  const int64_t n = x.numel(), size = group.size();
  const int64_t per = (n + size - 1) / size;
  at::Tensor flat = x.reshape({-1});
  if (per * size != n) flat = at::constant_pad_nd(flat, {0, per * size - n});
  // A copy, so the whole input can be freed: what partitioning is for.
  return flat.narrow(0, per * group.rank(), per).clone();
}

at::Tensor gather_activation(const at::Tensor& part, at::IntArrayRef sizes,
                             comm::ProcessGroup& group) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return all_gather_along(part, 0, group).narrow(0, 0, n).reshape(sizes);
}

models::CheckpointOptions tensor_parallel_checkpoint(const TensorParallelOptions& tp,
                                                     bool partition_activations) {
  models::CheckpointOptions o;
  if (tp.dropout_rng) {
    std::shared_ptr<DropoutRng> rng = tp.dropout_rng;
    o.get_rng_state = [rng] { return rng->state(); };
    o.set_rng_state = [rng](const at::Tensor& s) { rng->set_state(s); };
  }
  if (partition_activations && !tp.sequence_parallel && tp.group && tp.group->size() > 1) {
    // The graph may outlive this call; the group outlives the graph (tp_ops.h).
    comm::ProcessGroup* group = tp.group.get();
    o.pack_input = [group](const at::Tensor& x) { return partition_activation(x, *group); };
    o.unpack_input = [group](const at::Tensor& part, at::IntArrayRef sizes) {
      return gather_activation(part, sizes, *group);
    };
  }
  return o;
}

}  // namespace tessera::parallel
