// DistributedDataParallel: data-parallel training of any torch::nn::Module over a
// ProcessGroup, the C++ counterpart of torch.nn.parallel.DistributedDataParallel.
//
//   auto ddp = DistributedDataParallel(model, group);
//   auto loss = loss_fn(model->forward(x), y);   // call your module as usual
//   loss.backward();            // gradients are averaged across ranks on return
//   optimizer.step();
//
// Construction is collective: every rank checks that all ranks hold the same
// parameters and buffers (names, shapes, dtypes; ConfigError naming the first
// difference), then rank 0's values are broadcast so every replica starts equal.
// Gradient averaging is overlapped with backward by a Reducer (reducer.h): after
// backward() returns, each trainable parameter's .grad is a view into a bucket
// holding the average over all ranks.
//
// Ownership: shares the module and the group; the module must outlive nothing
// else, but must not gain or lose parameters after wrapping.
// Thread safety: none; use one wrapper per rank thread, from that thread.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/runtime/ddp/reducer.h"

namespace tessera::runtime::ddp {

struct DdpOptions {
  double bucket_cap_mb = 25.0;       // bucket size after the first one
  double first_bucket_cap_mb = 1.0;  // small first bucket: communication starts early
  // Allow parameters that get no gradient in some passes (costs a graph walk).
  bool find_unused_parameters = false;
  // Broadcast rank 0's buffers (e.g. running stats) when sync_buffers() is called.
  bool broadcast_buffers = true;
  CommHook comm_hook = CommHook::kNone;
  PowerSgdOptions powersgd;  // with comm_hook kPowerSgd (comm_hook.h)
  // Launch each bucket's all-reduce as soon as its gradients are ready (true), or
  // all of them after backward (false: slower; for measuring what overlap buys).
  bool overlap_comm = true;
};

class DistributedDataParallel {
 public:
  // Collective over `group`. Throws ConfigError if the replicas differ.
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                          std::shared_ptr<comm::ProcessGroup> group, DdpOptions options = {});

  torch::nn::Module& module() { return *module_; }
  const std::shared_ptr<torch::nn::Module>& module_ptr() const { return module_; }
  comm::ProcessGroup& group() { return *group_; }
  const DdpOptions& options() const { return options_; }
  Reducer& reducer() { return *reducer_; }

  // RAII scope in which backward accumulates gradients locally without
  // communicating (gradient accumulation). The first backward after the scope
  // reduces everything accumulated so far. Scopes may not nest.
  class NoSync {
   public:
    explicit NoSync(Reducer& reducer);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync(NoSync&& other) noexcept;

   private:
    Reducer* reducer_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*reducer_); }

  // Optional before backward(loss): lets find_unused_parameters mark parameters
  // the loss does not depend on without waiting for the end of backward.
  void prepare_for_backward(const at::Tensor& loss);

  // Zeroes the gradients in their buckets, in place (one memset per bucket): use it
  // instead of optimizer.zero_grad(), which in LibTorch 2.x sets them to None and
  // costs a copy into the buckets on the next backward.
  void zero_grad() { reducer_->zero_grad(); }

  // Collective: copies rank 0's buffers to every rank (no-op without buffers or
  // with broadcast_buffers off). Call before forward when buffers change.
  void sync_buffers();

  // Names of the parameters the reducer handles, in registration order.
  const std::vector<std::string>& parameter_names() const { return names_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<comm::ProcessGroup> group_;
  DdpOptions options_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> buffers_;
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace tessera::runtime::ddp

namespace tessera {
using DistributedDataParallel = runtime::ddp::DistributedDataParallel;
using DdpOptions = runtime::ddp::DdpOptions;
}  // namespace tessera
