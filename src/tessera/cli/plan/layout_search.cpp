#include "tessera/cli/plan/layout_search.h"

#include <algorithm>

namespace tessera::cli::plan {

namespace {

std::vector<int> divisors(int64_t n, int64_t limit) {
  std::vector<int> d;
  for (int64_t i = 1; i <= std::min(n, limit); ++i) {
    if (n % i == 0) d.push_back(static_cast<int>(i));
  }
  return d;
}

template <typename T>
bool allowed(const std::optional<T>& pin, T value) {
  return !pin || *pin == value;
}

// The (dp, tp, cp, pp, vp) splits the engines run, with cp = 1 only or cp > 1
// only.
std::vector<Layout> mesh_splits(const PlanProblem& problem, const LayoutFilter& f,
                                bool context_parallel) {
  const ModelSpec& m = problem.model;
  const int world = problem.cluster.world();
  std::vector<Layout> out;
  for (int tp : divisors(world, problem.cluster.devices_per_node)) {
    if (!allowed(f.tp, tp) || m.heads % tp || m.hidden % tp || m.vocab % tp) continue;
    for (int cp : divisors(world / tp, m.seq)) {
      if ((cp > 1) != context_parallel || !allowed(f.cp, cp) || m.seq % (2 * cp)) continue;
      for (int pp : divisors(world / (tp * cp), m.layers)) {
        if (!allowed(f.pp, pp) || m.layers % pp) continue;
        const int dp = world / (tp * cp * pp);
        if (!allowed(f.dp, dp) || problem.global_batch % dp) continue;
        for (int vp = 1; vp <= m.layers / pp; vp *= 2) {
          if (vp > 1 && (pp == 1 || (m.layers / pp) % vp)) break;
          if (!allowed(f.vp, vp)) continue;
          // Expert parallelism splits the experts over ep of the dp ranks.
          for (int ep : divisors(dp, m.moe() ? m.experts : 1)) {
            if (!allowed(f.ep, ep) || (m.moe() && m.experts % ep)) continue;
            Layout l;
            l.dp = dp;
            l.tp = tp;
            l.cp = cp;
            l.pp = pp;
            l.vp = vp;
            l.ep = ep;
            out.push_back(l);
          }
          if (pp == 1) break;
        }
      }
    }
  }
  return out;
}

// ZeRO stages, offload and recompute choices for one split and micro-batch.
void add_variants(const PlanProblem& problem, const LayoutFilter& f, Layout base,
                  std::vector<Candidate>& out) {
  const bool model_parallel = base.tp > 1 || base.pp > 1 || base.cp > 1 || base.ep > 1;
  const int max_zero = base.dp == 1 ? 0 : (model_parallel ? 1 : 3);
  for (int zero = 0; zero <= max_zero; ++zero) {
    if (!allowed(f.zero, zero)) continue;
    base.zero = zero;
    for (bool recompute : {false, true}) {
      if (!allowed(f.recompute, recompute)) continue;
      for (bool offload : {false, true}) {
        if (!allowed(f.offload, offload)) continue;
        // Offload needs a ZeRO engine without model parallelism.
        if (offload && (zero == 0 || model_parallel)) continue;
        Layout l = base;
        l.recompute = recompute;
        l.offload = offload;
        Candidate c = evaluate(problem, l);
        // Worth trying: recompute or offload only when the plain variant does
        // not fit (and the user did not ask for them).
        if (recompute && !f.recompute) {
          Layout plain = l;
          plain.recompute = false;
          if (estimate_memory(problem, plain).fits()) continue;
        }
        if (offload && !f.offload) {
          Layout plain = l;
          plain.offload = false;
          if (estimate_memory(problem, plain).fits()) continue;
        }
        out.push_back(c);
      }
    }
  }
}

}  // namespace

Candidate evaluate(const PlanProblem& problem, const Layout& layout) {
  Candidate c;
  c.layout = layout;
  c.memory = estimate_memory(problem, layout);
  c.time = estimate_step_time(problem, layout);
  const double tokens = static_cast<double>(problem.global_batch) * problem.model.seq;
  c.tokens_per_second = tokens / c.time.total;
  const double peak = problem.cluster.device_flops(problem.precision) * layout.world();
  c.step_mfu = c.time.flops / (c.time.total * peak);
  return c;
}

namespace {

void add_splits(const PlanProblem& problem, const LayoutFilter& filter, bool context_parallel,
                std::vector<Candidate>& out) {
  for (const Layout& split : mesh_splits(problem, filter, context_parallel)) {
    const int64_t per_replica = problem.global_batch / split.dp;
    // Micro-batches past 64 sequences gain nothing a plan needs to show.
    const int64_t max_mb = filter.micro_batch ? *filter.micro_batch : 64;
    for (int mb : divisors(per_replica, max_mb)) {
      if (!allowed(filter.micro_batch, static_cast<int64_t>(mb))) continue;
      Layout l = split;
      l.micro_batch = mb;
      l.micro_batches = per_replica / mb;
      // A pipeline needs at least p micro-batches to fill; interleaving needs
      // a multiple of p.
      if (l.pp > 1 && l.micro_batches < l.pp) continue;
      if (l.vp > 1 && l.micro_batches % l.pp) continue;
      add_variants(problem, filter, l, out);
    }
  }
}

}  // namespace

std::vector<Candidate> search_layouts(const PlanProblem& problem, const LayoutFilter& filter) {
  std::vector<Candidate> out;
  if (!filter.cp || *filter.cp == 1) add_splits(problem, filter, false, out);
  // Context parallelism costs communication in every attention layer: worth
  // trying where nothing without it fits, or when asked for.
  const bool fits = std::any_of(out.begin(), out.end(),
                                [](const Candidate& c) { return c.memory.fits(); });
  if ((filter.cp && *filter.cp > 1) || (!filter.cp && !fits)) {
    add_splits(problem, filter, true, out);
  }
  // Equal throughput (the MFU is an input, so the micro-batch often does not
  // change it): the one needing less memory first.
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (a.tokens_per_second != b.tokens_per_second) {
      return a.tokens_per_second > b.tokens_per_second;
    }
    return a.memory.total() < b.memory.total();
  });
  return out;
}

}  // namespace tessera::cli::plan
