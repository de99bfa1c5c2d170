#include "tessera/runtime/ddp/comm_hook.h"

#include <ATen/ATen.h>

#include "tessera/core/check.h"
#include "tessera/runtime/ddp/powersgd_hook.h"

namespace tessera::runtime::ddp {
namespace {

// none, fp16 and bf16: one collective per bucket, no state between steps.
class AllReduceReduction : public BucketReduction {
 public:
  AllReduceReduction(CommHook hook, size_t buckets) : hook_(hook), inflight_(buckets) {}

  void launch(comm::ProcessGroup& group, size_t bucket, const at::Tensor& flat) override {
    InFlight& f = inflight_.at(bucket);
    if (hook_ == CommHook::kNone) {
      f.work = group.all_reduce(flat, comm::ReduceOp::kAvg);
      return;
    }
    const auto dtype = hook_ == CommHook::kFp16 ? at::kHalf : at::kBFloat16;
    // Divide before compressing: the sum of world_size fp16 values may overflow
    // where their average would not.
    f.compressed = flat.div(static_cast<double>(group.size())).to(dtype);
    f.work = group.all_reduce(f.compressed, comm::ReduceOp::kSum);
  }

  void finish(comm::ProcessGroup&, size_t bucket, at::Tensor& flat) override {
    InFlight f = std::move(inflight_.at(bucket));
    inflight_[bucket] = InFlight{};
    if (f.work) f.work->wait();
    if (f.compressed.defined()) flat.copy_(f.compressed);
  }

  void abandon() noexcept override {
    for (auto& f : inflight_) {
      try {
        if (f.work) f.work->wait();
      } catch (...) {
      }
      f = InFlight{};
    }
  }

 private:
  struct InFlight {
    comm::WorkHandle work;
    at::Tensor compressed;  // the 16-bit copy on the wire
  };
  CommHook hook_;
  std::vector<InFlight> inflight_;
};

}  // namespace

CommHook parse_comm_hook(const std::string& name) {
  if (name == "none" || name.empty()) return CommHook::kNone;
  if (name == "fp16") return CommHook::kFp16;
  if (name == "bf16") return CommHook::kBf16;
  if (name == "powersgd") return CommHook::kPowerSgd;
  TS_THROW(ConfigError, "unknown comm hook '", name, "': use none, fp16, bf16 or powersgd");
}

const char* to_string(CommHook hook) {
  switch (hook) {
    case CommHook::kNone: return "none";
    case CommHook::kFp16: return "fp16";
    case CommHook::kBf16: return "bf16";
    case CommHook::kPowerSgd: return "powersgd";
  }
  return "?";
}

std::unique_ptr<BucketReduction> make_bucket_reduction(CommHook hook, const PowerSgdOptions& powersgd,
                                                       std::vector<BucketLayout> layouts) {
  if (hook == CommHook::kPowerSgd) {
    return std::make_unique<PowerSgdReduction>(powersgd, std::move(layouts));
  }
  return std::make_unique<AllReduceReduction>(hook, layouts.size());
}

}  // namespace tessera::runtime::ddp
