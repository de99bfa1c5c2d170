// FlopsProfiler: parameters, FLOPs and time of one forward pass, per module,
// like DeepSpeed's flops profiler (the config's "flops_profiler" section).
//
//   profiling::FlopsProfiler profiler;
//   profiler.start();              // on the thread that runs the model
//   auto loss = model->loss(x, y); // the next forward is the one profiled
//   profiler.stop();
//   std::cout << profiler.report({/*module_depth=*/2, /*top_modules=*/3, true});
//
// How it sees modules: LibTorch's C++ modules have no forward hooks, so the
// model marks its forwards with models::ModuleScope (the GPT does). The first
// outermost scope entered after start() is the root; the profile ends when it
// exits, so backward, a recompute under activation checkpointing, and later
// micro-batches are not counted. Every module under the root is named by its
// path ("h.0.attn.c_attn"), including those whose forward is not marked
// (a Linear the model calls through its weights).
//
// How it counts: an at::RecordFunction callback on this thread sees each ATen
// operator with its inputs. The outermost call with a FLOP formula
// (op_flops.h: linear, matmuls, the fused attention) is counted, not the
// kernels it calls. An operator belongs to the module that owns a parameter
// among its inputs (a Linear's weight, or a view of it such as weight.t(): they
// are matched by storage), else to the innermost marked module
// running. Time: a marked module's is the wall time of its forward; another
// module's is the time of the operators that belong to it. Both include the
// profiler's own cost of a few microseconds per operator.
//
// Threads: one profiler per thread, used by that thread only. Operators that
// run on other threads (intra-op workers) are timed inside the caller's op.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/models/module_scope.h"

namespace at {
struct ObserverContext;
struct RecordFunction;
}  // namespace at

namespace tessera::runtime::profiling {

struct ModuleProfile {
  std::string name;       // path from the root ("" for the root itself)
  std::string type;       // the module's class, "Linear", "CausalSelfAttention"
  int depth = 0;          // 0: the root
  int64_t params = 0;     // its parameters and its submodules'
  double flops = 0;       // forward FLOPs, submodules included
  double seconds = 0;     // forward time, submodules included
  double self_flops = 0;  // without the submodules'
  double self_seconds = 0;
};

struct ProfileReportOptions {
  int64_t module_depth = -1;  // deepest level in the table (0: the root only); -1: all
  int64_t top_modules = 1;    // how many modules to list by their own FLOPs and time
  bool detailed = true;       // false: the summary and the top modules only, no table
  std::string title;          // first line, e.g. "flops profile at step 5"
};

class FlopsProfiler : public models::ModuleScopeObserver {
 public:
  FlopsProfiler();
  ~FlopsProfiler() override;  // stops if still running
  FlopsProfiler(const FlopsProfiler&) = delete;
  FlopsProfiler& operator=(const FlopsProfiler&) = delete;

  // Observes this thread until stop(): the next outermost marked forward is
  // profiled. Throws if already started.
  void start();
  // Removes the observer and the operator callback; idempotent.
  void stop();

  // True once a whole root forward was seen.
  bool complete() const { return complete_; }
  // Pre-order (parents before children, registration order); empty until complete.
  const std::vector<ModuleProfile>& modules() const { return modules_; }
  // The root's totals (0 until complete).
  double total_flops() const;
  double total_seconds() const;
  int64_t total_params() const;

  // The text DeepSpeed's profiler prints: a summary, the top modules and,
  // with detailed, a table per module down to module_depth.
  std::string report(const ProfileReportOptions& options) const;

  // ModuleScopeObserver (called by models::ModuleScope).
  void enter(const torch::nn::Module* module) override;
  void exit(const torch::nn::Module* module) override;

  // The operator callback's entry points (one profiler per thread: a
  // thread-local pointer finds it). Not for users.
  std::unique_ptr<at::ObserverContext> op_start(const at::RecordFunction& fn);
  void op_end(at::ObserverContext* frame);

 private:
  using Clock = std::chrono::steady_clock;
  struct Node;  // a module under the root, with its counters
  void index_root(const torch::nn::Module* root);
  void finish();

  std::vector<Node> nodes_;  // pre-order; [0] is the root
  std::unordered_map<const torch::nn::Module*, size_t> node_of_module_;
  std::unordered_map<const void*, size_t> node_of_param_;          // StorageImpl* of a parameter
  std::vector<std::pair<size_t, Clock::time_point>> scope_stack_;  // marked forwards running
  int op_depth_ = 0;    // operators running (nested calls included)
  int in_counted_ = 0;  // counted operators running (their inner calls are not counted)
  bool started_ = false, capturing_ = false, complete_ = false;
  uint64_t callback_handle_ = 0;
  models::ModuleScopeObserver* previous_observer_ = nullptr;
  std::vector<ModuleProfile> modules_;
};

}  // namespace tessera::runtime::profiling
