// Reducer: averages the gradients of a set of parameters across a process group,
// overlapping the all_reduce with backward.
//
// Gradients live in flat buckets (see bucket_assignment.h); each parameter's
// .grad is made a view into its bucket, so AccumulateGrad writes straight into the
// buffer that goes on the wire and finalize copies nothing back. A post hook on
// each parameter's gradient accumulator (kept alive by the reducer) marks the
// parameter ready; when a bucket's last gradient is ready, and every earlier
// bucket has been launched, its async all_reduce is queued while backward goes on.
// Launching strictly in bucket order keeps the collective order identical on every
// rank even if autograd delivers gradients in a different order. At the end of
// backward (an autograd engine callback) the reducer waits for every bucket.
// The comm hook (comm_hook.h) decides how a bucket is averaged.
//
// Unused parameters: with find_unused_parameters they are marked ready (their
// gradient counts as zero) by prepare_for_backward's graph traversal or, failing
// that, at the end of backward. Without it, a parameter that got no gradient is a
// ConfigError naming it.
//
// Ownership: the reducer holds the parameters (shared tensors) and the group.
// Thread safety: none; backward runs the hooks on the thread that called it (CPU)
// and that thread must be the one queueing the group's collectives.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/runtime/ddp/bucket_assignment.h"
#include "tessera/runtime/ddp/comm_hook.h"

namespace torch::autograd {
struct Node;
}

namespace tessera::runtime::ddp {

struct ReducerOptions {
  int64_t bucket_cap_bytes = kDefaultBucketCapBytes;
  int64_t first_bucket_cap_bytes = kDefaultFirstBucketCapBytes;
  bool find_unused_parameters = false;
  CommHook comm_hook = CommHook::kNone;
  PowerSgdOptions powersgd;  // with comm_hook kPowerSgd
  bool overlap_comm = true;   // false: no bucket launches before backward ends
};

// Timing of the last synchronized backward pass, for overlap checks and profiling.
struct ReducerTimings {
  using Clock = std::chrono::steady_clock;
  Clock::time_point first_grad;    // first gradient hook of the pass
  Clock::time_point last_grad;     // last gradient hook of the pass
  Clock::time_point backward_end;  // autograd finished computing gradients
  Clock::time_point reduced;       // every bucket reduced
  std::vector<Clock::time_point> bucket_launch;  // per bucket, launch order
};

class Reducer {
 public:
  // params must all require grad and live on one device; names are for errors.
  Reducer(std::vector<std::string> names, std::vector<at::Tensor> params,
          std::shared_ptr<comm::ProcessGroup> group, ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // When false, hooks do nothing and gradients just accumulate locally (no_sync).
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }

  // Optional, before backward: with find_unused_parameters, marks every parameter
  // unreachable from `outputs` ready now so its bucket needs no wait for it.
  // May queue collectives. No-op without find_unused_parameters or without sync.
  void prepare_for_backward(const std::vector<at::Tensor>& outputs);

  // Zeroes every gradient bucket in place (one memset per bucket) and points each
  // parameter's .grad back at its bucket view. Not during a backward pass.
  void zero_grad();
  // Points every .grad that is undefined (LibTorch 2.x's zero_grad sets them to
  // None) or was replaced back at its bucket view, zeroed or filled with the
  // replacement, so the next backward accumulates straight into the buckets with
  // no copy. Cheap when nothing changed; called by the Engine before backward.
  void bind_gradients();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // The flat gradient buffer of each bucket.
  const std::vector<at::Tensor>& bucket_buffers() const { return flats_; }
  const ReducerTimings& last_timings() const { return timings_; }
  const ReducerOptions& options() const { return options_; }
  // Number of synchronized backward passes completed.
  int64_t reductions() const { return reductions_; }

 private:
  struct Slot {
    size_t bucket = 0;
    int64_t offset = 0;
    at::Tensor view;  // this parameter's region of the bucket, shaped like it
    bool ready = false;
  };
  void on_grad_ready(size_t index);
  // .grad of parameter `index` := its bucket view, keeping the current value.
  void bind_gradient(size_t index);
  void mark_ready(size_t index);
  void launch_ready_buckets();
  void finalize();
  void reset_iteration();
  void wait_launched_quietly();

  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;
  std::shared_ptr<comm::ProcessGroup> group_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<at::Tensor> flats_;
  std::vector<Slot> slots_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  // Cleared by the destructor: hooks outlive the reducer inside the accumulators.
  std::shared_ptr<Reducer*> self_;

  bool sync_ = true;
  bool in_backward_ = false;
  std::vector<int64_t> pending_;  // per bucket: gradients still missing
  size_t next_launch_ = 0;
  std::unique_ptr<BucketReduction> reduction_;
  ReducerTimings current_;  // the pass in progress
  ReducerTimings timings_;  // the last completed pass
  int64_t reductions_ = 0;
};

}  // namespace tessera::runtime::ddp
