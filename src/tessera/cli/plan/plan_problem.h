// PlanProblem and Layout: what `tessera plan` is asked (a model on a cluster at a
// global batch and precision) and one answer it weighs (how the devices are
// split: dp x tp x cp x pp with v virtual stages, the ZeRO stage over dp, offload,
// activation recomputation, the micro-batch).
//
// StateLayout says which bytes per parameter the model state takes:
//   kTessera    what this tree allocates: float32 parameters (the optimizer's
//               master weights), float32 gradients, Adam's two float32 moments:
//               4 + 4 + 8 bytes under every precision (docs/precision.md). ZeRO-3
//               keeps the embeddings and tensors under the persistence threshold
//               whole (docs/zero.md).
//   kZeroPaper  mixed-precision Adam as in the ZeRO paper: 16-bit parameters and
//               gradients, float32 master weights and moments: 2 + 2 + 12 (fp32
//               training: 4 + 4 + 8); ZeRO-3 shards everything.
// Pure values.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/cli/plan/cluster_spec.h"
#include "tessera/cli/plan/model_spec.h"

namespace tessera::cli::plan {

enum class StateLayout { kTessera, kZeroPaper };
StateLayout parse_state_layout(const std::string& name);  // tessera | zero-paper
const char* state_layout_name(StateLayout s);

// Bytes per parameter of each part of the model state (Adam).
struct StateBytes {
  double param = 0;      // what the model computes with
  double grad = 0;       // its gradient
  double optimizer = 0;  // master weights (if separate) and moments
  double total() const { return param + grad + optimizer; }
};
StateBytes state_bytes(StateLayout layout, Precision precision);

struct PlanProblem {
  ModelSpec model;
  ClusterSpec cluster;
  Precision precision = Precision::kFp32;
  StateLayout state_layout = StateLayout::kTessera;
  int64_t global_batch = 0;  // sequences per optimizer step
  bool sequence_parallel = false;
  // Engine settings the memory and time models follow (config.h defaults).
  double ddp_bucket_bytes = 25.0 * 1024 * 1024;     // data_parallel bucket_cap_mb
  double zero_bucket_elements = 5e8;                // zero_optimization.reduce_bucket_size
  int64_t persistence_threshold = 100000;           // stage3_param_persistence_threshold
  // Usable fraction of device memory (allocator fragmentation, runtime context).
  double memory_headroom = 0.9;

  void validate() const;
  // Bytes per element of activations and of tensor/pipeline-parallel messages.
  double activation_bytes() const { return precision == Precision::kFp32 ? 4.0 : 2.0; }
};

struct Layout {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int cp = 1;  // context parallel: every sequence split over cp ranks
  int ep = 1;  // expert parallel (MoE): each layer's experts split over ep of the dp ranks
  int vp = 1;  // virtual pipeline stages (model chunks) per device
  int zero = 0;
  bool offload = false;    // optimizer state off the device
  bool recompute = false;  // full activation checkpointing of every block
  int64_t micro_batch = 1;    // sequences per micro-batch
  int64_t micro_batches = 1;  // per data-parallel replica and step

  int world() const { return dp * tp * pp * cp; }
  // "dp8 tp1 pp1 z1 mb4x2", plus " cp2" (after tp), " ep4" (after dp), " v2",
  // " offload", " recompute" when set.
  std::string describe() const;
};

}  // namespace tessera::cli::plan
