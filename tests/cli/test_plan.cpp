// `tessera plan`'s formulas without processes: the ZeRO paper's memory figures,
// the GPT parameter count, the activation and FLOP formulas, the alpha-beta
// collective times, the layout search, and the spot-instance cost model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tessera/cli/plan/layout_search.h"
#include "tessera/cli/plan/memory_model.h"
#include "tessera/cli/plan/plan_report.h"
#include "tessera/cli/plan/step_time_model.h"
#include "tessera/cli/plan/training_cost.h"
#include "tessera/core/error.h"

namespace tessera::cli::plan {
namespace {

double round1(double x) { return std::round(x * 10.0) / 10.0; }

// Rajbhandari et al. 2020, figure 1 / table 1: Ψ = 7.5 B, N_d = 64,
// mixed-precision Adam (K = 12): 120, 31.4, 16.6 and 1.9 GB per device.
TEST(Plan, ReproducesTheZeroPaperFigures) {
  PlanProblem p;
  p.model.name = "7.5B";
  p.model.layers = 32;
  p.model.hidden = 4096;
  p.model.heads = 32;
  p.model.seq = 1024;
  p.model.vocab = 50304;
  p.model.total_params_override = 7500000000;
  p.cluster = cluster_preset("a100-80g", 8);
  p.cluster.nodes = 8;
  p.precision = Precision::kFp16;
  p.state_layout = StateLayout::kZeroPaper;
  p.global_batch = 64;
  const double expected[4] = {120.0, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage) {
    Layout l;
    l.dp = 64;
    l.zero = stage;
    const MemoryEstimate m = estimate_memory(p, l);
    std::printf("[plan] ZeRO stage %d, 7.5B on 64 devices: %.4f GB of model states\n", stage,
                m.model_states() / 1e9);
    EXPECT_EQ(round1(m.model_states() / 1e9), expected[stage]) << "stage " << stage;
  }
  // The exact formulas: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N.
  const double psi = 7.5e9;
  Layout l;
  l.dp = 64;
  l.zero = 1;
  EXPECT_DOUBLE_EQ(estimate_memory(p, l).model_states(), 4 * psi + 12 * psi / 64);
  l.zero = 2;
  EXPECT_DOUBLE_EQ(estimate_memory(p, l).model_states(), 2 * psi + 14 * psi / 64);
  l.zero = 3;
  EXPECT_DOUBLE_EQ(estimate_memory(p, l).model_states(), 16 * psi / 64);
}

// Tessera's own layout: 4 + 4 + 8 bytes, what docs/zero.md's table measures.
TEST(Plan, TesseraStatesFollowTheEngine) {
  PlanProblem p;
  p.model.layers = 4;
  p.model.hidden = 64;
  p.model.heads = 2;
  p.model.seq = 16;
  p.model.vocab = 64;
  p.model.bias = false;
  p.cluster = cluster_preset("host", 4);
  p.global_batch = 8;
  p.persistence_threshold = 100;  // as tests/runtime/test_zero.cpp sets it
  // Tessera's GPT: per block 12h² + 4h (LayerNorms) without Linear biases; wte,
  // wpe and ln_f outside.
  EXPECT_EQ(p.model.total_params(), 4 * (12 * 64 * 64 + 4 * 64) + 64 * 64 + 16 * 64 + 2 * 64);
  const double psi = static_cast<double>(p.model.total_params());
  Layout l;
  l.dp = 4;
  const double expected[3] = {16 * psi, 8 * psi + 8 * psi / 4, 4 * psi + 12 * psi / 4};
  for (int stage = 0; stage < 3; ++stage) {
    l.zero = stage;
    EXPECT_DOUBLE_EQ(estimate_memory(p, l).model_states(), expected[stage]) << stage;
  }
  // Stage 3 keeps the embeddings, final LayerNorm and small tensors whole.
  l.zero = 3;
  const double whole = device_whole_params(p, l);
  EXPECT_DOUBLE_EQ(whole, 64 * 64 + 16 * 64 + 2 * 64 + 4 * (4 * 64));
  EXPECT_DOUBLE_EQ(estimate_memory(p, l).params, 4 * ((psi - whole) / 4 + whole));
}

TEST(Plan, GptPresetsHaveTheirPublishedSizes) {
  EXPECT_NEAR(gpt_preset("gpt-125m").total_params() / 1e6, 125, 10);
  EXPECT_NEAR(gpt_preset("gpt-1.3b").total_params() / 1e9, 1.3, 0.1);
  EXPECT_NEAR(gpt_preset("gpt-7b").total_params() / 1e9, 6.7, 0.2);
  EXPECT_NEAR(gpt_preset("gpt-175b").total_params() / 1e9, 175, 3);
  EXPECT_THROW(gpt_preset("gpt-8b"), ConfigError);
}

// Korthikanti et al. 2022: 34sbh + 5as²b bytes per layer (16-bit), and with
// tensor parallelism sbh(10 + 24/t + 5as/(ht)).
TEST(Plan, ActivationsFollowKorthikanti) {
  PlanProblem p;
  p.model = gpt_preset("gpt-7b");
  p.precision = Precision::kBf16;
  Layout l;
  l.micro_batch = 2;
  const double s = 2048, b = 2, h = 4096, a = 32;
  EXPECT_DOUBLE_EQ(block_activation_bytes(p, l), 34 * s * b * h + 5 * a * s * s * b);
  l.tp = 8;
  EXPECT_DOUBLE_EQ(block_activation_bytes(p, l), s * b * h * (10 + 24.0 / 8 + 5 * a * s / (h * 8)));
  p.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(block_activation_bytes(p, l), (34 * s * b * h + 5 * a * s * s * b) / 8);
  p.precision = Precision::kFp32;
  EXPECT_DOUBLE_EQ(block_activation_bytes(p, l), 2 * (34 * s * b * h + 5 * a * s * s * b) / 8);
}

// Narayanan et al. 2021: 72 B s l h² (1 + s/(6h) + V/(12 l h)), 96 with recompute.
TEST(Plan, StepFlopsFollowNarayanan) {
  const ModelSpec m = gpt_preset("gpt-7b");
  const double s = 2048, l = 32, h = 4096, V = 50304;
  EXPECT_NEAR(m.step_flops(1, false) / (72 * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))),
              1.0, 1e-12);
  EXPECT_NEAR(m.step_flops(1, true) / (96 * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))),
              1.0, 1e-12);
}

// alpha-beta with the nccl-tests bus bandwidth factors.
TEST(Plan, CollectivesUseBusBandwidth) {
  ClusterSpec c = cluster_preset("h100", 8);
  c.nodes = 2;
  const double S = 1e9;
  EXPECT_DOUBLE_EQ(all_reduce_seconds(c, 8, 8, S, 1), 14 * c.intra_alpha + S * 2 * 7 / 8 / 370e9);
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(c, 8, 8, S, 1), 7 * c.intra_alpha + S * 7 / 8 / 370e9);
  // Across nodes, 8 of the group per node share 8 NICs; 1 per node gets one.
  EXPECT_DOUBLE_EQ(c.busbw(16, 8), std::min(370e9, 8 * 42e9));
  EXPECT_DOUBLE_EQ(c.busbw(2, 1), 42e9);
  EXPECT_EQ(all_reduce_seconds(c, 1, 1, S, 1), 0.0);
}

TEST(Plan, SearchRanksByThroughputAndMarksWhatDoesNotFit) {
  PlanProblem p;
  p.model = gpt_preset("gpt-7b");
  p.cluster = cluster_preset("h100", 8);
  p.cluster.nodes = 2;
  p.precision = Precision::kBf16;
  p.global_batch = 256;
  const auto ranked = search_layouts(p, {});
  ASSERT_FALSE(ranked.empty());
  int fitting = 0;
  for (size_t i = 0; i < ranked.size(); ++i) {
    const Layout& l = ranked[i].layout;
    EXPECT_EQ(l.world(), 16);
    EXPECT_EQ(l.dp * l.micro_batch * l.micro_batches, 256);
    if (i) {
      EXPECT_GE(ranked[i - 1].tokens_per_second, ranked[i].tokens_per_second);
    }
    if (l.tp > 1 || l.pp > 1) {
      EXPECT_LE(l.zero, 1) << l.describe();
    }
    fitting += ranked[i].memory.fits();
  }
  EXPECT_GT(fitting, 0);
  // Plain DDP of 7 B parameters (16 bytes each = 107 GB) cannot fit 80 GiB.
  LayoutFilter ddp;
  ddp.tp = 1;
  ddp.pp = 1;
  ddp.zero = 0;
  ddp.recompute = false;
  for (const auto& c : search_layouts(p, ddp)) EXPECT_FALSE(c.memory.fits()) << c.layout.describe();
  const PlanReport r = make_report(p, ranked, 5, 2);
  int shown_fit = 0;
  for (const auto& c : r.shown) shown_fit += c.memory.fits();
  EXPECT_EQ(shown_fit, 5);
  EXPECT_LE(static_cast<int>(r.shown.size()), 7);
  for (const auto& c : r.shown) {
    if (!c.memory.fits()) {
      EXPECT_GT(c.tokens_per_second, r.shown.back().tokens_per_second);
    }
  }
  EXPECT_EQ(report_json(r)["layouts"].size(), r.shown.size());
}

// Context parallelism: a rank holds seq / cp tokens and no attention
// probabilities; the search weighs cp only where nothing without it fits.
TEST(Plan, ContextParallelSplitsTheSequenceWhereNothingElseFits) {
  PlanProblem p;
  p.model = gpt_preset("gpt-7b");
  p.model.seq = 131072;
  p.cluster = cluster_preset("h100", 8);
  p.cluster.nodes = 4;
  p.precision = Precision::kBf16;
  p.sequence_parallel = true;
  p.global_batch = 8;
  p.cluster.overlap = 0.8;  // a fifth of the ring's transfers exposed
  Layout l;
  l.tp = 8;
  const double s = 131072, h = 4096;
  l.cp = 4;
  EXPECT_DOUBLE_EQ(block_activation_bytes(p, l), 34 * (s / 4) * h / 8);
  EXPECT_EQ(l.describe(), "dp1 tp8 cp4 pp1 z0 mb1x1");
  l.cp = 1;
  EXPECT_GT(block_activation_bytes(p, l), 100 * 34 * s * h / 8);  // the 5as^2 term dominates
  LayoutFilter no_cp;
  no_cp.cp = 1;
  for (const auto& c : search_layouts(p, no_cp)) {
    EXPECT_EQ(c.layout.cp, 1);
    EXPECT_FALSE(c.memory.fits()) << c.layout.describe();
  }
  const auto ranked = search_layouts(p, {});
  int fitting_cp = 0;
  for (const auto& c : ranked) {
    EXPECT_EQ(c.layout.world(), 32);
    if (c.layout.cp > 1) {
      EXPECT_LE(c.layout.zero, 1) << c.layout.describe();
    }
    if (c.layout.cp > 1 && c.memory.fits()) {
      ++fitting_cp;
      EXPECT_GT(c.time.cp_comm, 0.0) << c.layout.describe();
    }
  }
  EXPECT_GT(fitting_cp, 0);
  const auto best = std::find_if(ranked.begin(), ranked.end(),
                                 [](const Candidate& c) { return c.memory.fits(); });
  ASSERT_NE(best, ranked.end());
  std::printf("[plan] GPT-7B at 128K tokens on 32 H100s: best fitting %s, %.1f GB per device\n",
              best->layout.describe().c_str(), best->memory.total() / 1e9);
  EXPECT_GT(best->layout.cp, 1);
}

// A mixture-of-experts GPT: parameters count every expert, FLOPs the k a token
// meets (k F = 4h here: the dense MLP's, plus the router's 2hE); ep divides
// the experts' weights (and their ZeRO-1 shards go over dp / ep), costs four
// all-to-alls per block and micro-batch, and runs with ZeRO 0-1.
TEST(Plan, ExpertParallelSplitsTheExpertsAndPaysItsAllToAlls) {
  PlanProblem p;
  p.model = gpt_preset("gpt-350m");
  p.model.hidden = 1024;
  p.model.heads = 16;
  p.model.layers = 4;
  ModelSpec dense = p.model;
  p.model.experts = 16;
  p.model.topk = 2;
  p.model.expert_hidden = 2048;
  p.cluster = cluster_preset("h100", 8);
  p.precision = Precision::kBf16;
  p.global_batch = 16;
  const double h = 1024, E = 16, F = 2048, s = 2048, l = 4;
  EXPECT_EQ(p.model.block_expert_params(), static_cast<int64_t>(E * (2 * h * F + F + h)));
  EXPECT_EQ(p.model.block_params(),
            static_cast<int64_t>(4 * h * h + 8 * h + h * E + E * (2 * h * F + F + h)));
  EXPECT_NEAR(p.model.step_flops(1, false) - dense.step_flops(1, false), 3 * s * l * 2 * h * E,
              1e-6 * dense.step_flops(1, false));
  Layout one;
  one.dp = 8;
  one.zero = 1;
  one.micro_batch = 2;
  Layout eight = one;
  eight.ep = 8;
  EXPECT_EQ(eight.describe(), "dp8 ep8 tp1 pp1 z1 mb2x1");
  const double e1 = device_expert_params(p, one), e8 = device_expert_params(p, eight);
  EXPECT_DOUBLE_EQ(e1, l * E * (2 * h * F + F + h));
  EXPECT_DOUBLE_EQ(e8, e1 / 8);
  EXPECT_DOUBLE_EQ(device_params(p, one) - device_params(p, eight), e1 - e8);
  const StateBytes sb = state_bytes(p.state_layout, p.precision);
  const double psi8 = device_params(p, eight);
  EXPECT_DOUBLE_EQ(estimate_memory(p, eight).optimizer, sb.optimizer * ((psi8 - e8) / 8 + e8));
  EXPECT_EQ(estimate_step_time(p, one).ep_comm, 0.0);
  const StepTime t8 = estimate_step_time(p, eight);
  EXPECT_GT(t8.ep_comm, 0.0);
  int with_ep = 0;
  for (const auto& c : search_layouts(p, {})) {
    EXPECT_EQ(c.layout.world(), 8);
    if (c.layout.ep == 1) continue;
    ++with_ep;
    EXPECT_EQ(c.layout.dp % c.layout.ep, 0) << c.layout.describe();
    EXPECT_LE(c.layout.zero, 1) << c.layout.describe();
    EXPECT_GT(c.time.ep_comm, 0.0) << c.layout.describe();
  }
  EXPECT_GT(with_ep, 0);
  p.model.topk = 17;
  EXPECT_THROW(p.model.validate(), ConfigError);
}

TEST(Plan, PipelineBubbleShrinksWithVirtualStages) {
  PlanProblem p;
  p.model = gpt_preset("gpt-1.3b");
  p.cluster = cluster_preset("a100-80g", 8);
  p.precision = Precision::kBf16;
  p.global_batch = 16;
  Layout l;
  l.pp = 4;
  l.dp = 2;
  l.micro_batch = 1;
  l.micro_batches = 8;
  const StepTime one = estimate_step_time(p, l);
  l.vp = 2;
  const StepTime two = estimate_step_time(p, l);
  // (p-1)/(v m) of the ideal time.
  EXPECT_NEAR(one.bubble / (one.compute - one.bubble), 3.0 / 8, 1e-12);
  EXPECT_NEAR(two.bubble / (two.compute - two.bubble), 3.0 / 16, 1e-12);
}

// More ranks than cores on a host: each tensor-parallel all-reduce also waits a
// scheduler time slice; one rank per core, or GPUs, never do.
TEST(Plan, OversubscribedHostsPayATimeSlicePerTensorParallelCollective) {
  PlanProblem p;
  p.model = gpt_preset("gpt-125m");
  p.global_batch = 8;
  Layout l;
  l.tp = 2;
  l.micro_batch = 1;
  l.micro_batches = 8;
  p.cluster = cluster_preset("host", 2);
  p.cluster.cores_per_node = 2;
  p.cluster.oversubscribed_sync = 1.5e-3;
  const double fits = estimate_step_time(p, l).tp_comm;
  p.cluster.devices_per_node = 4;
  p.cluster.validate();
  const double crowded = estimate_step_time(p, l).tp_comm;
  // 4 all-reduces per block, on every micro-batch.
  const double calls = 4.0 * p.model.layers * l.micro_batches;
  EXPECT_NEAR(crowded - fits, calls * 1.5e-3, 1e-9);
  EXPECT_EQ(cluster_preset("h100", 8).sync_penalty(), 0.0);
  ClusterSpec host = cluster_preset("host", 1);
  EXPECT_EQ(host.sync_penalty(), 0.0) << "one rank per core is not oversubscribed";
  EXPECT_NEAR(host.oversubscribed_sync,
              0.75e-3 * (1 + std::floor(std::log2(static_cast<double>(host.cores_per_node)))),
              1e-12);
}

TEST(Plan, SpotCostCountsLostWorkAndRestarts) {
  CostInputs in;
  in.tokens_per_step = 1e6;
  in.step_seconds = 2.0;
  in.devices = 16;
  in.tokens = 1e10;  // 10,000 steps = 20,000 s
  in.price_per_device_hour = 3.0;
  TrainingCost on_demand = estimate_training_cost(in);
  EXPECT_DOUBLE_EQ(on_demand.steps, 10000);
  EXPECT_DOUBLE_EQ(on_demand.seconds, 20000);
  EXPECT_DOUBLE_EQ(on_demand.cost, 20000 / 3600.0 * 16 * 3.0);
  EXPECT_FALSE(on_demand.spot);

  in.spot_discount = 0.7;
  in.preemptions_per_day = 4;
  in.checkpoint_seconds = 60;
  in.restart_seconds = 300;
  const TrainingCost spot = estimate_training_cost(in);
  ASSERT_TRUE(spot.spot);
  const double lambda = 4 / 86400.0;
  const double tau = std::sqrt(2 * 60 / lambda);  // Young's optimum
  EXPECT_NEAR(spot.chosen.checkpoint_interval, tau, 1e-9);
  const double expected = 20000 * (1 + 60 / tau) / (1 - lambda * (tau / 2 + 300));
  EXPECT_NEAR(spot.chosen.seconds, expected, 1e-6);
  EXPECT_NEAR(spot.chosen.cost, expected / 3600 * 16 * 3.0 * 0.3, 1e-6);
  // The optimum beats every listed interval.
  for (const auto& e : spot.others) EXPECT_GE(e.seconds, spot.chosen.seconds * (1 - 1e-3));
  // Preempted more often than a checkpoint interval plus a restart: never ends.
  in.preemptions_per_day = 1000;
  in.checkpoint_interval = 3600;
  EXPECT_TRUE(std::isinf(estimate_training_cost(in).chosen.seconds));
  in.tokens = 0;
  EXPECT_THROW(estimate_training_cost(in), ConfigError);
}

TEST(Plan, BadInputsNameTheFlag) {
  PlanProblem p;
  p.model = gpt_preset("gpt-125m");
  p.cluster = cluster_preset("h100", 8);
  p.global_batch = 0;
  try {
    p.validate();
    FAIL() << "a zero batch was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--global-batch"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cluster_preset("tpu-v5", 8), ConfigError);
  EXPECT_THROW(parse_precision("fp8"), ConfigError);
  p.model.heads = 7;
  EXPECT_THROW(p.model.validate(), ConfigError);
}

}  // namespace
}  // namespace tessera::cli::plan
