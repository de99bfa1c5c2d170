// Predicted time of one optimizer step of a layout (docs/plan.md):
//   compute     the model's FLOPs (Narayanan et al. 2021) at the device's peak
//               times the MFU, split over tp x pp; a pipeline of p stages with v
//               chunks runs m micro-batches in (m + (p-1)/v) micro-batch times,
//               the (p-1)/v extra being the bubble. Where devices share
//               cores (a host with more ranks than cores) a waiting stage
//               yields its core: the longer of all the work on the node's
//               cores and the critical path at a whole core's speed.
//   tensor par. 4 all-reduces of b·s·h activations per block and micro-batch
//               (6 with recomputation), on the critical path; on a host with
//               more ranks than cores each also waits about a scheduler time
//               slice for the parked members (ClusterSpec::sync_penalty).
//   pipeline    one send of b·s·h activations forward and one of gradients
//               backward per chunk and micro-batch.
//   expert      (MoE, ep > 1) per block and micro-batch, four all-to-alls (the
//   parallel    tokens out and the outputs back, forward and backward) of the
//               b·s·k·h float32 rows each rank routes, (ep-1)/ep of them
//               leaving the rank; not hidden. Expert gradients reduce over the
//               dp/ep ranks holding the same experts.
//   context     per block and micro-batch, ring attention passes cp-1 key/value
//   parallel    blocks (2·b·(s/cp)·h/t elements) forward, and cp-1 of them plus
//               cp float32 key/value gradients backward; the block attention
//               hides up to cluster.overlap of it. Compute divides by cp, and the
//               data-parallel collectives run over dp x cp ranks.
//   data par.   ZeRO-0: all-reduce of the gradients once per step; ZeRO-1:
//               reduce-scatter + all-gather once per step; ZeRO-2: a
//               reduce-scatter per micro-batch + all-gather; ZeRO-3: per
//               micro-batch two all-gathers of the parameters and a
//               reduce-scatter (1.5x). Each is alpha per step plus bytes x
//               busbw factor / busbw (nccl-tests), in buckets.
//   overlap     what runs during backward (DDP buckets, ZeRO reduce-scatters) or
//               is prefetched (ZeRO-3 gathers) hides behind compute, up to
//               cluster.overlap of it; the last bucket and the post-step
//               all-gathers never do.
//   copies      on a host: ZeRO-2 copies each micro-batch's gradients into a
//               flat buffer, ZeRO-3 also writes every gathered unit twice:
//               bytes through memory the compute cores move themselves.
//   optimizer   Adam reads and writes 32 bytes per local parameter at the
//               device's memory bandwidth; offload adds moving the state.
// Pure functions.
#pragma once

#include "tessera/cli/plan/plan_problem.h"

namespace tessera::cli::plan {

struct StepTime {
  double compute = 0;     // seconds, bubble included
  double bubble = 0;      // of compute
  double tp_comm = 0;     // exposed tensor-parallel collectives
  double pp_comm = 0;     // exposed pipeline sends
  double cp_comm = 0;     // exposed ring-attention transfers
  double ep_comm = 0;     // expert-parallel all-to-alls
  double dp_comm = 0;     // data-parallel collectives, before overlap
  double dp_exposed = 0;  // after overlap
  double zero_copies = 0; // ZeRO-2/3 flat-buffer copies through memory
  double optimizer = 0;   // optimizer step (+ offload traffic)
  double total = 0;       // compute + tp + pp + cp + ep + dp_exposed + zero_copies + optimizer
  double flops = 0;       // model FLOPs of the step, all devices together
};

StepTime estimate_step_time(const PlanProblem& problem, const Layout& layout);

// Collective times over `n` ranks placed `per_node` to a node, of `bytes` in
// `calls` calls: alpha-beta with the nccl-tests bus bandwidth factors.
double all_reduce_seconds(const ClusterSpec& c, int n, int per_node, double bytes, double calls);
double reduce_scatter_seconds(const ClusterSpec& c, int n, int per_node, double bytes,
                              double calls);

}  // namespace tessera::cli::plan
