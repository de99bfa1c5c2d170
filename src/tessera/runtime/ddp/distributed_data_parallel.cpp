#include "tessera/runtime/ddp/distributed_data_parallel.h"

#include <ATen/ATen.h>


#include "tessera/core/check.h"
#include "tessera/runtime/replicas.h"

namespace tessera::runtime::ddp {
DistributedDataParallel::NoSync::NoSync(Reducer& reducer) : reducer_(&reducer) {
  TS_CHECK(reducer.sync(), "no_sync() scopes may not nest");
  previous_ = reducer.sync();
  reducer.set_sync(false);
}

DistributedDataParallel::NoSync::NoSync(NoSync&& other) noexcept
    : reducer_(other.reducer_), previous_(other.previous_) {
  other.reducer_ = nullptr;
}

DistributedDataParallel::NoSync::~NoSync() {
  if (reducer_) reducer_->set_sync(previous_);
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<comm::ProcessGroup> group,
                                                 DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  TS_CHECK_T(ConfigError, module_ != nullptr, "DistributedDataParallel needs a module");
  TS_CHECK_T(ConfigError, group_ != nullptr, "DistributedDataParallel needs a process group");
  TS_CHECK_T(ConfigError, options_.bucket_cap_mb > 0 && options_.first_bucket_cap_mb > 0,
             "bucket_cap_mb must be positive (got ", options_.bucket_cap_mb, ")");
  verify_replicas_match(*module_, *group_, "DistributedDataParallel");
  std::vector<at::Tensor> all;
  for (const auto& kv : module_->named_parameters(true)) {
    all.push_back(kv.value());
    if (!kv.value().requires_grad()) continue;
    names_.push_back(kv.key());
    params_.push_back(kv.value());
  }
  for (const auto& kv : module_->named_buffers(true)) {
    buffers_.push_back(kv.value());
    all.push_back(kv.value());
  }
  broadcast_from_rank0(all, *group_);
  ReducerOptions ro;
  ro.bucket_cap_bytes = static_cast<int64_t>(options_.bucket_cap_mb * (1 << 20));
  ro.first_bucket_cap_bytes = static_cast<int64_t>(options_.first_bucket_cap_mb * (1 << 20));
  ro.find_unused_parameters = options_.find_unused_parameters;
  ro.comm_hook = options_.comm_hook;
  ro.powersgd = options_.powersgd;
  ro.overlap_comm = options_.overlap_comm;
  reducer_ = std::make_unique<Reducer>(names_, params_, group_, ro);
}

void DistributedDataParallel::prepare_for_backward(const at::Tensor& loss) {
  reducer_->prepare_for_backward({loss});
}

void DistributedDataParallel::sync_buffers() {
  if (!options_.broadcast_buffers) return;
  broadcast_from_rank0(buffers_, *group_);
}

}  // namespace tessera::runtime::ddp
