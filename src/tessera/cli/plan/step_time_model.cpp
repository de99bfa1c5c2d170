#include "tessera/cli/plan/step_time_model.h"

#include <algorithm>
#include <cmath>

#include "tessera/cli/plan/memory_model.h"

namespace tessera::cli::plan {

double all_reduce_seconds(const ClusterSpec& c, int n, int per_node, double bytes, double calls) {
  if (n <= 1 || bytes <= 0) return 0;
  // Ring: 2(n-1) steps of alpha; busbw = algbw x 2(n-1)/n.
  return calls * 2.0 * (n - 1) * c.alpha(n, per_node) +
         bytes * 2.0 * (n - 1) / n / c.busbw(n, per_node);
}

double reduce_scatter_seconds(const ClusterSpec& c, int n, int per_node, double bytes,
                              double calls) {
  if (n <= 1 || bytes <= 0) return 0;
  // All-gather costs the same: n-1 steps; busbw = algbw x (n-1)/n.
  return calls * (n - 1) * c.alpha(n, per_node) + bytes * (n - 1.0) / n / c.busbw(n, per_node);
}

namespace {

// Ranks of a group of `size` per node when the groups of `inner` consecutive
// ranks inside it are laid out tp innermost, then dp, then pp (Megatron order).
int per_node(const ClusterSpec& c, int size, int inner) {
  const int fit = std::max(1, c.devices_per_node / std::max(1, inner));
  return std::min(size, fit);
}

struct DpTraffic {
  double total = 0;     // seconds of dp collectives per step
  double hideable = 0;  // of which may run behind compute
};

// The data-parallel collectives of `psi` parameters over `n` ranks (every
// replica of them: dp x cp, or for MoE experts dp / ep).
DpTraffic dp_traffic(const PlanProblem& problem, const Layout& layout, double psi, int n) {
  const ClusterSpec& c = problem.cluster;
  const int k = per_node(c, n, layout.tp);
  const double m = static_cast<double>(layout.micro_batches);
  const bool paper = problem.state_layout == StateLayout::kZeroPaper;
  const bool sixteen = problem.precision != Precision::kFp32;
  // Bytes per element on the wire. DDP sends gradients in the training dtype;
  // Tessera's ZeRO units and parameters are float32, the paper's 16-bit.
  const double ddp_grad = sixteen ? 2.0 : 4.0;
  const double zero_elem = paper && sixteen ? 2.0 : 4.0;
  DpTraffic t;
  if (n <= 1) return t;
  if (layout.zero == 0) {
    const double bytes = psi * ddp_grad;
    const double calls = std::ceil(bytes / problem.ddp_bucket_bytes);
    t.total = all_reduce_seconds(c, n, k, bytes, calls);
    // Every bucket but the last is reduced while backward goes on.
    t.hideable = t.total * (calls - 1) / std::max(1.0, calls);
    return t;
  }
  const double bytes = psi * zero_elem;
  const double calls = std::ceil(psi / problem.zero_bucket_elements);
  const double rs = reduce_scatter_seconds(c, n, k, bytes, calls);
  if (layout.zero == 1) {
    t.total = 2 * rs;  // one reduce-scatter at the boundary, one all-gather after the step
    t.hideable = rs * (calls - 1) / std::max(1.0, calls);
  } else if (layout.zero == 2) {
    t.total = m * rs + rs;
    t.hideable = m * rs * (calls - 1) / std::max(1.0, calls);
  } else {
    // Units are blocks: one call per block per collective.
    const double unit_calls = static_cast<double>(problem.model.layers) / layout.pp + 1;
    const double rs3 = reduce_scatter_seconds(c, n, k, bytes, unit_calls);
    t.total = m * 3 * rs3;
    // All but the first unit's gather (nothing to prefetch behind) can hide.
    t.hideable = t.total - rs3 / unit_calls;
  }
  return t;
}

}  // namespace

StepTime estimate_step_time(const PlanProblem& problem, const Layout& layout) {
  const ModelSpec& model = problem.model;
  const ClusterSpec& c = problem.cluster;
  StepTime st;
  const double rate = c.device_flops(problem.precision) * c.mfu;
  const double mb_flops = model.step_flops(static_cast<double>(layout.micro_batch),
                                           layout.recompute);
  const double split = static_cast<double>(layout.tp) * layout.pp * layout.cp;
  const double t_mb = mb_flops / split / rate;
  st.flops = model.step_flops(static_cast<double>(layout.micro_batch), false) *
             static_cast<double>(layout.micro_batches) * layout.dp;

  // Tensor parallel: all-reduces of b·s·h activations inside the tp group.
  const double act = static_cast<double>(layout.micro_batch) * model.seq / layout.cp *
                     model.hidden * problem.activation_bytes();
  const double blocks = static_cast<double>(model.layers) / layout.pp;
  double tp_mb = 0;
  if (layout.tp > 1) {
    const int k = per_node(c, layout.tp, 1);
    const double per_block = layout.recompute ? 6.0 : 4.0;
    tp_mb = all_reduce_seconds(c, layout.tp, k, act * blocks * per_block, blocks * per_block) +
            blocks * per_block * c.sync_penalty();
  }
  // Pipeline: a send forward and one backward per chunk; neighbours are
  // tp * cp * dp ranks apart, in another node once that exceeds a node.
  double pp_mb = 0;
  if (layout.pp > 1) {
    const bool same_node = layout.tp * layout.cp * layout.dp < c.devices_per_node;
    const double bw = same_node ? c.intra_busbw : c.inter_busbw;
    const double alpha = same_node ? c.intra_alpha : c.inter_alpha;
    pp_mb = 2.0 * layout.vp * (alpha + act / layout.tp / bw);
  }
  // Context parallel: ring transfers to the next cp rank, tp ranks apart.
  double cp_mb = 0;
  if (layout.cp > 1) {
    const bool same_node = layout.tp * layout.cp <= c.devices_per_node;
    const double bw = same_node ? c.intra_busbw : c.inter_busbw;
    const double alpha = same_node ? c.intra_alpha : c.inter_alpha;
    const double kv = 2.0 * act / layout.tp;  // one rank's keys and values
    const double per_block = (layout.cp - 1.0) * 2.0 * (alpha + kv / bw) +
                             layout.cp * (alpha + kv * 4.0 / problem.activation_bytes() / bw);
    cp_mb = blocks * per_block * (1.0 - c.overlap);
  }
  const double m = static_cast<double>(layout.micro_batches);
  const double slots = layout.pp > 1 ? m + (layout.pp - 1.0) / layout.vp : m;
  st.compute = slots * t_mb;
  // Devices sharing cores (more ranks than cores on a host): a stage waiting in
  // the bubble leaves its core to the others, so the step takes the longer of
  // all the work on the node's cores and the pipeline's critical path at the
  // speed of a core of its own.
  const double alone = (problem.precision == Precision::kFp32 ? c.peak_flops_fp32
                                                                : c.peak_flops_16) * c.mfu;
  if (alone > rate) {
    const double t_alone = mb_flops / split / alone;
    st.compute = std::max(m * t_mb, slots * t_alone);
  }
  st.bubble = st.compute - m * t_mb;
  st.tp_comm = slots * tp_mb;
  st.pp_comm = slots * pp_mb;
  st.cp_comm = slots * cp_mb;
  // Expert parallel: the ep group is ep dp ranks, tp * cp ranks apart.
  double ep_mb = 0;
  if (layout.ep > 1 && model.moe()) {
    const int k = per_node(c, layout.ep, layout.tp * layout.cp);
    const double rows = static_cast<double>(layout.micro_batch) * model.seq / layout.cp *
                        model.topk * model.hidden * 4.0;
    // An all-to-all: ep-1 peers of alpha, (ep-1)/ep of the rows over busbw.
    const double one = (layout.ep - 1) * c.alpha(layout.ep, k) +
                       rows * (layout.ep - 1.0) / layout.ep / c.busbw(layout.ep, k);
    ep_mb = blocks * 4.0 * one;
  }
  st.ep_comm = slots * ep_mb;

  const double psi = device_params(problem, layout);
  const double psi_experts = device_expert_params(problem, layout);
  const int replicas = layout.dp * layout.cp;
  DpTraffic dp = dp_traffic(problem, layout, psi, replicas);
  if (layout.ep > 1) {  // the experts' gradients travel over their own, smaller groups
    dp = dp_traffic(problem, layout, psi - psi_experts, replicas);
    const DpTraffic experts = dp_traffic(problem, layout, psi_experts, replicas / layout.ep);
    dp.total += experts.total;
    dp.hideable += experts.hideable;
  }
  st.dp_comm = dp.total;
  // What can hide: behind the backward of the last micro-batch (2/3 of its
  // compute) for gradient reductions, behind all compute for ZeRO-3's gathers.
  const double cover = layout.zero == 3 ? st.compute : (2.0 / 3.0) * t_mb * (layout.zero == 2 ? m : 1);
  const double hidden = std::min(dp.hideable, cover) * c.overlap;
  st.dp_exposed = dp.total - hidden;

  // ZeRO moves parameters and gradients through flat buffers besides the
  // collectives: stage 2 copies each micro-batch's gradients into the buffer it
  // reduce-scatters (read + write), stage 3 also writes every gathered unit
  // twice (forward and backward; read + write each). On a host (ranks sharing
  // the node's memory, node_memory_bw) the compute cores do these copies; a
  // GPU's collectives write into the buffers themselves, beside compute.
  const StateBytes sb_copy = state_bytes(problem.state_layout, problem.precision);
  double copied = 0;
  if (c.node_memory_bw <= 0) copied = -1;  // not counted
  if (copied == 0 && layout.zero == 2) copied = 2.0 * sb_copy.grad;
  if (copied == 0 && layout.zero == 3) copied = 2.0 * sb_copy.grad + 4.0 * sb_copy.param;
  st.zero_copies = copied > 0 ? m * psi * copied / c.device_memory_bw() : 0.0;

  const double local = layout.zero >= 1
                           ? (psi - psi_experts) / replicas + psi_experts * layout.ep / replicas
                           : psi;
  st.optimizer = local * 32.0 / c.device_memory_bw();
  if (layout.offload) {
    const StateBytes sb = state_bytes(problem.state_layout, problem.precision);
    // Tessera swaps the optimizer state through files (read and write it); a
    // GPU offload moves gradients down and parameters up.
    const double moved = problem.state_layout == StateLayout::kTessera ? 2.0 * sb.optimizer
                                                                       : sb.grad + sb.param;
    st.optimizer += local * moved / c.offload_bw;
  }
  st.total = st.compute + st.tp_comm + st.pp_comm + st.cp_comm + st.ep_comm + st.dp_exposed +
             st.zero_copies + st.optimizer;
  return st;
}

}  // namespace tessera::cli::plan
