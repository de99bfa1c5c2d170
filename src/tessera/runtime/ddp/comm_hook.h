// Communication hooks: how the reducer averages one gradient bucket across
// data-parallel ranks (PyTorch DDP's register_comm_hook).
//
//   none      all_reduce AVG of the float bucket
//   fp16/bf16 a 16-bit copy, pre-divided by the world size so the sum cannot
//             overflow fp16, all-reduced with SUM and copied back: half the bytes,
//             at the cost of 16-bit rounding of the averaged gradient
//   powersgd  a rank-r approximation of each large matrix gradient (Vogels et
//             al., 2019; powersgd_hook.h): r (rows + cols) numbers on the wire
//             instead of rows x cols, with error feedback
//
// A BucketReduction is made once per reducer and may keep state per bucket.
// launch() starts a bucket's reduction (asynchronous where it can be: the
// reducer queues it while backward goes on); finish() completes it, leaving the
// average in `flat`, and rethrows the collective's error. At most one reduction
// per bucket is in flight; every rank launches and finishes the buckets in the
// same order. Called from the thread that queues the group's collectives.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"

namespace tessera::runtime::ddp {

enum class CommHook { kNone, kFp16, kBf16, kPowerSgd };

// "none", "fp16", "bf16", "powersgd" (ConfigError naming the choices otherwise).
CommHook parse_comm_hook(const std::string& name);
const char* to_string(CommHook hook);

// PyTorch's PowerSGDState, with its names and defaults.
struct PowerSgdOptions {
  int64_t matrix_approximation_rank = 1;
  // Plain all-reduces for the first iterations (the gradients change fast early on).
  int64_t start_powersgd_iter = 1000;
  // Compress a matrix only when rows x cols > min_compression_rate x r (rows + cols).
  double min_compression_rate = 2.0;
  bool use_error_feedback = true;  // add the last step's compression error to the gradient
  bool warm_start = true;          // start each power iteration from the last Q
  double orthogonalization_epsilon = 0.0;
  uint64_t random_seed = 0;        // the initial Qs, equal on every rank
};

// The parameters of one bucket: where each starts in the flat buffer, and its shape.
struct BucketLayout {
  std::vector<int64_t> offsets;
  std::vector<std::vector<int64_t>> shapes;
};

class BucketReduction {
 public:
  virtual ~BucketReduction() = default;
  virtual void launch(comm::ProcessGroup& group, size_t bucket, const at::Tensor& flat) = 0;
  virtual void finish(comm::ProcessGroup& group, size_t bucket, at::Tensor& flat) = 0;
  // Waits for whatever is in flight and forgets it, ignoring errors (teardown
  // and error paths: the pass that launched it reports them).
  virtual void abandon() noexcept = 0;
};

// The reduction `hook` names, for buckets laid out as `layouts`.
std::unique_ptr<BucketReduction> make_bucket_reduction(CommHook hook, const PowerSgdOptions& powersgd,
                                                       std::vector<BucketLayout> layouts);

}  // namespace tessera::runtime::ddp
