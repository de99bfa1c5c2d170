#include "tessera/cli/plan/memory_model.h"

#include <algorithm>

namespace tessera::cli::plan {

double device_params(const PlanProblem& problem, const Layout& layout) {
  const ModelSpec& m = problem.model;
  const double h = static_cast<double>(m.hidden), t = layout.tp;
  const double blocks_here = static_cast<double>(m.layers) / layout.pp;
  // The first stage holds the token and position embeddings (and, without a
  // pipeline, the final LayerNorm too).
  const double outside = layout.pp == 1 ? static_cast<double>(m.outside_params())
                                        : static_cast<double>((m.vocab + m.seq) * m.hidden);
  const double experts = device_expert_params(problem, layout);
  if (m.moe()) {
    // Attention's GEMM weights and column biases split; LayerNorms, its row
    // bias and the router whole; the experts as device_expert_params says.
    const double split = 4.0 * h * h + (m.bias ? 3.0 * h : 0.0);
    const double replicated = 4.0 * h + (m.bias ? h : 0.0) + h * static_cast<double>(m.experts);
    const double wte = static_cast<double>(m.vocab) * h;
    return blocks_here * (split / t + replicated) + wte / t + (outside - wte) + experts;
  }
  if (m.total_params_override > 0 || t == 1) {
    const double blocks = static_cast<double>(m.total_params() - m.outside_params());
    return (blocks * blocks_here / m.layers + outside) / t;
  }
  // Tensor parallelism splits the GEMM weights, the column-parallel biases and
  // the token embedding (vocabulary-parallel); LayerNorms, the row-parallel
  // biases and the position embedding are replicated (Megatron's split).
  const double split = 12.0 * h * h + (m.bias ? 7.0 * h : 0.0);
  const double replicated = m.bias ? 6.0 * h : 4.0 * h;
  const double wte = static_cast<double>(m.vocab) * h;
  return blocks_here * (split / t + replicated) + wte / t + (outside - wte);
}

double device_expert_params(const PlanProblem& problem, const Layout& layout) {
  const ModelSpec& m = problem.model;
  if (!m.moe()) return 0;
  const double h = static_cast<double>(m.hidden), f = static_cast<double>(m.expert_width());
  const double e = static_cast<double>(m.experts) / layout.ep;
  const double blocks_here = static_cast<double>(m.layers) / layout.pp;
  // Both weights and the first bias split over tp; the output bias whole.
  return blocks_here * e * ((2.0 * h * f + (m.bias ? f : 0.0)) / layout.tp + (m.bias ? h : 0.0));
}

double device_whole_params(const PlanProblem& problem, const Layout& layout) {
  if (problem.state_layout != StateLayout::kTessera) return 0;
  const ModelSpec& m = problem.model;
  const double outside = layout.pp == 1 ? static_cast<double>(m.outside_params())
                                        : static_cast<double>((m.vocab + m.seq) * m.hidden);
  const double small = static_cast<double>(m.block_small_params(problem.persistence_threshold));
  return (outside + small * m.layers / layout.pp) / layout.tp;
}

double block_activation_bytes(const PlanProblem& problem, const Layout& layout) {
  const ModelSpec& m = problem.model;
  // Under context parallelism a rank holds seq / cp tokens, and its block
  // attention keeps no probabilities (recomputed from the log-sum-exp in
  // backward): the 5as/h term, attention's quadratic part, goes away.
  const double s = static_cast<double>(m.seq) / layout.cp, b = static_cast<double>(layout.micro_batch);
  const double h = static_cast<double>(m.hidden);
  const double a = layout.cp > 1 ? 0.0 : static_cast<double>(m.heads);
  const double t = layout.tp;
  // Korthikanti et al. count 16-bit activations (and 1-byte dropout masks);
  // float32 activations take twice the bytes.
  const double scale = problem.activation_bytes() / 2.0;
  // Korthikanti's 34: 10 outside tp's GEMMs and 24 inside (of which the MLP's
  // 3 and 16). MoE: the MLP's as the header says.
  double whole = 10.0, split = 24.0;
  if (m.moe()) {
    const double k = static_cast<double>(m.topk), f = static_cast<double>(m.expert_width());
    whole += -3.0 + 2.0 + 4.0 * k;
    split += -16.0 + 4.0 * k * f / h;
  }
  double per_block;
  if (t == 1 || problem.sequence_parallel) {
    per_block = s * b * h * (whole + split + 5.0 * a * s / h) / t;
  } else {
    per_block = s * b * h * (whole + split / t + 5.0 * a * s / (h * t));
  }
  return per_block * scale;
}

namespace {

double activation_bytes(const PlanProblem& problem, const Layout& layout) {
  const ModelSpec& m = problem.model;
  const double block = block_activation_bytes(problem, layout);
  const double blocks_on_stage = static_cast<double>(m.layers) / layout.pp;
  // Micro-batches whose activations the first stage holds at once: 1 without a
  // pipeline; p for 1F1B (each of l/p blocks), more when interleaved.
  double in_flight = 1.0;
  if (layout.pp > 1) {
    in_flight = std::min<double>(layout.pp, static_cast<double>(layout.micro_batches));
    if (layout.vp > 1) in_flight *= 1.0 + (layout.pp - 1.0) / (layout.pp * layout.vp);
  }
  double stored;
  if (layout.recompute) {
    // Only each block's input is kept; one block is rebuilt at a time.
    const double sbh = static_cast<double>(m.seq) / layout.cp * layout.micro_batch * m.hidden *
                       problem.activation_bytes() /
                       (problem.sequence_parallel ? layout.tp : 1);
    stored = sbh * blocks_on_stage * in_flight + block;
  } else {
    stored = block * blocks_on_stage * in_flight;
  }
  // Logits and their gradient in float32 (the loss is computed in float32),
  // split over tp by the vocabulary-parallel head.
  const double logits = 2.0 * 4.0 * static_cast<double>(m.seq) / layout.cp * layout.micro_batch *
                        m.vocab / layout.tp;
  return stored + logits;
}

double state_transient_bytes(const PlanProblem& problem, const Layout& layout,
                             const StateBytes& sb, double psi, double block);

double transient_bytes(const PlanProblem& problem, const Layout& layout, const StateBytes& sb,
                       double psi) {
  const ModelSpec& m = problem.model;
  const double block = static_cast<double>(m.block_params()) / layout.tp;
  // Ring attention computes one piece of queries against one of keys at a time
  // (seq / 2cp each way): its float32 scores, probabilities and their gradient.
  const double piece = static_cast<double>(m.seq) / (2.0 * layout.cp);
  const double ring = layout.cp > 1 ? 3.0 * 4.0 * piece * piece * layout.micro_batch *
                                          static_cast<double>(m.heads) / layout.tp
                                    : 0.0;
  // The all-to-all's send and receive buffers of one MoE layer (float32).
  const double a2a = layout.ep > 1 ? 2.0 * 4.0 * static_cast<double>(m.seq) / layout.cp *
                                         layout.micro_batch * m.topk * m.hidden
                                   : 0.0;
  return ring + a2a + state_transient_bytes(problem, layout, sb, psi, block);
}

double state_transient_bytes(const PlanProblem& problem, const Layout& layout,
                             const StateBytes& sb, double psi, double block) {
  switch (layout.zero) {
    case 0:
      // 16-bit gradients on the wire: a cast copy of the buckets in flight.
      return problem.precision == Precision::kFp32
                 ? 0.0
                 : 2.0 * std::min(psi * 2.0, problem.ddp_bucket_bytes);
    case 1:
    case 2:
      // Up to two units' gradients flattened for the reduce-scatter.
      return 2.0 * std::min(psi, problem.zero_bucket_elements) * sb.grad;
    default:
      // The unit running and the one prefetched, whole, and one unit's gradients.
      return 2.0 * block * sb.param + block * sb.grad;
  }
}

}  // namespace

MemoryEstimate estimate_memory(const PlanProblem& problem, const Layout& layout) {
  const StateBytes sb = state_bytes(problem.state_layout, problem.precision);
  const double psi = device_params(problem, layout);
  const double n = layout.dp * layout.cp;  // ZeRO shards over every replica of the parameters
  // Experts shard over the n / ep ranks holding the same ones.
  const double experts = device_expert_params(problem, layout);
  const double sharded = (psi - experts) / n + experts * layout.ep / n;
  MemoryEstimate e;
  e.params = sb.param * psi;
  e.grads = sb.grad * psi;
  e.optimizer = sb.optimizer * psi;
  if (layout.zero >= 1) e.optimizer = sb.optimizer * sharded;
  if (layout.zero >= 2) e.grads = sb.grad * sharded;
  if (layout.zero >= 3) {
    const double whole = std::min(psi, device_whole_params(problem, layout));
    e.params = sb.param * ((psi - whole) / n + whole);
  }
  if (layout.offload) e.optimizer = 0;
  e.activations = activation_bytes(problem, layout);
  e.transient = transient_bytes(problem, layout, sb, psi);
  e.usable = problem.cluster.memory_bytes * problem.memory_headroom;
  return e;
}

}  // namespace tessera::cli::plan
