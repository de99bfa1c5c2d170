// tessera plan: which parallel layouts to try for a model on a cluster, with
// predicted memory per device and step time, ranked by throughput; with
// --tokens/--steps and prices, time and cost to train, on demand and on spot
// machines. The formulas live in cli/plan/ (docs/plan.md).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>
#include <string>

#include "tessera/cli/commands/command.h"
#include "tessera/cli/commands/parse_args.h"
#include "tessera/cli/plan/layout_search.h"
#include "tessera/cli/plan/plan_report.h"
#include "tessera/core/check.h"
#include "tessera/runtime/profiling/peak_flops.h"

namespace tessera::cli {

namespace {

struct PlanFlags {
  // Model.
  std::string model;
  double params = 0;
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
  int64_t experts = 0, topk = 2, expert_hidden = 0;
  bool no_bias = false;
  // Cluster.
  std::string cluster = "host";
  int gpus_per_node = 0, nodes = 1;
  double memory_gb = 0, intra_gbps = 0, inter_gbps = 0, peak_tflops = 0, mfu = 0;
  std::optional<double> overlap;
  // Training.
  int64_t global_batch = 0;
  std::string precision;
  std::string model_states = "tessera";
  bool sequence_parallel = false;
  // Filters and output.
  plan::LayoutFilter filter;
  std::optional<int> offload, recompute;
  int top = 10, max_oom = 3;
  bool all = false, json = false;
  // Cost.
  double tokens = 0, steps = 0, price = 0, spot_discount = 0, preemptions = 0;
  double checkpoint_seconds = -1, checkpoint_interval_minutes = 0, restart_minutes = 10;
  double checkpoint_gbps = 2.0;
};

void add_flags(CLI::App& app, PlanFlags& f) {
  app.add_option("--model", f.model, "GPT preset: gpt-125m ... gpt-7b, gpt-13b, gpt-175b");
  app.add_option("--params", f.params, "total parameters (e.g. 7e9), with --layers and --hidden");
  app.add_option("--layers", f.layers, "transformer blocks");
  app.add_option("--hidden", f.hidden, "hidden size");
  app.add_option("--heads", f.heads, "attention heads");
  app.add_option("--seq", f.seq, "sequence length (default 2048)");
  app.add_option("--vocab", f.vocab, "vocabulary (default 50304)");
  app.add_flag("--no-bias", f.no_bias, "Linear and LayerNorm layers without biases");
  app.add_option("--experts", f.experts,
                 "mixture of experts: experts per block in place of the MLP (model.num_experts)");
  app.add_option("--topk", f.topk, "experts per token (model.moe_router_topk, default 2)");
  app.add_option("--expert-hidden", f.expert_hidden,
                 "each expert's hidden width (model.moe_ffn_hidden_size, default 4 x hidden)");
  app.add_option("--cluster", f.cluster, "host (this machine), a100-80g, h100, h200");
  app.add_option("--gpus-per-node", f.gpus_per_node, "devices (ranks) per node");
  app.add_option("--nodes", f.nodes, "nodes (default 1)");
  app.add_option("--memory-gb", f.memory_gb, "memory per device, GB (1e9 bytes)");
  app.add_option("--intra-gbps", f.intra_gbps, "collective bus bandwidth inside a node, GB/s");
  app.add_option("--inter-gbps", f.inter_gbps, "network bandwidth per device, GB/s");
  app.add_option("--peak-tflops", f.peak_tflops,
                 "peak dense GEMM TFLOP/s per device at the chosen precision "
                 "(host: of one core, e.g. from tessera doctor)");
  app.add_option("--mfu", f.mfu, "model FLOPs utilization of compute, (0, 1]");
  app.add_option("--overlap", f.overlap,
                 "fraction of communication that can hide behind compute, [0, 1]");
  app.add_option("--global-batch", f.global_batch, "sequences per optimizer step")->required();
  app.add_option("--precision", f.precision, "fp32, bf16 or fp16 (default: fp32 on host, "
                                             "else bf16)");
  app.add_option("--model-states", f.model_states,
                 "tessera (4+4+8 bytes/param, what this tree allocates) or zero-paper "
                 "(2+2+12 under bf16/fp16)");
  app.add_flag("--sequence-parallel", f.sequence_parallel,
               "activations split over tp outside the GEMMs too (Korthikanti et al.)");
  app.add_option("--dp", f.filter.dp, "only layouts with this data-parallel size");
  app.add_option("--tp", f.filter.tp, "only this tensor-parallel size");
  app.add_option("--pp", f.filter.pp, "only this pipeline-parallel size");
  app.add_option("--cp", f.filter.cp,
                 "only this context-parallel size (default: cp > 1 is weighed only when no "
                 "layout without it fits)");
  app.add_option("--ep", f.filter.ep,
                 "only this expert-parallel size (MoE; default: every ep dividing dp and --experts)");
  app.add_option("--vp", f.filter.vp, "only this number of virtual stages per device");
  app.add_option("--zero", f.filter.zero, "only this ZeRO stage");
  app.add_option("--micro-batch", f.filter.micro_batch, "only this micro-batch size");
  app.add_option("--offload", f.offload, "0 or 1: only layouts without / with offload");
  app.add_option("--recompute", f.recompute, "0 or 1: only without / with recomputation");
  app.add_option("--top", f.top, "layouts that fit to list (default 10)");
  app.add_option("--max-oom", f.max_oom, "faster layouts that do not fit to list (default 3)");
  app.add_flag("--all", f.all, "list every layout weighed");
  app.add_flag("--json", f.json, "print JSON instead of the table");
  app.add_option("--tokens", f.tokens, "tokens to train: prints time and cost");
  app.add_option("--steps", f.steps, "or optimizer steps to train");
  app.add_option("--price-per-device-hour", f.price, "on-demand price of one device-hour");
  app.add_option("--spot-discount", f.spot_discount, "spot price = (1 - this) x on demand");
  app.add_option("--preemptions-per-day", f.preemptions, "expected preemptions of the job a day");
  app.add_option("--checkpoint-seconds", f.checkpoint_seconds,
                 "time to save a checkpoint (default: estimated from --checkpoint-gbps)");
  app.add_option("--checkpoint-gbps", f.checkpoint_gbps, "checkpoint write rate per node, GB/s");
  app.add_option("--checkpoint-interval-minutes", f.checkpoint_interval_minutes,
                 "minutes of work between checkpoints (default: Young's optimum)");
  app.add_option("--restart-minutes", f.restart_minutes, "minutes to restart after a preemption");
}

plan::ModelSpec model_from(const PlanFlags& f) {
  plan::ModelSpec m;
  if (!f.model.empty()) {
    m = plan::gpt_preset(f.model);
  } else {
    TS_CHECK_T(ConfigError, f.layers > 0 && f.hidden > 0,
               "give --model NAME, or --layers and --hidden (with --heads, --seq, --vocab, "
               "--params as needed)");
    m.name = "custom";
    m.seq = 2048;
    m.vocab = 50304;
  }
  if (f.layers) m.layers = f.layers;
  if (f.hidden) m.hidden = f.hidden;
  if (f.heads) m.heads = f.heads;
  if (m.heads == 0) m.heads = m.hidden % 128 == 0 ? m.hidden / 128 : 1;
  if (f.seq) m.seq = f.seq;
  if (f.vocab) m.vocab = f.vocab;
  if (f.no_bias) m.bias = false;
  if (f.params > 0) m.total_params_override = static_cast<int64_t>(f.params);
  m.experts = f.experts;
  m.topk = f.topk;
  m.expert_hidden = f.expert_hidden;
  m.validate();
  return m;
}

plan::ClusterSpec cluster_from(const PlanFlags& f, plan::Precision precision) {
  plan::ClusterSpec c = plan::cluster_preset(f.cluster, f.gpus_per_node);
  c.nodes = f.nodes;
  if (f.memory_gb > 0) c.memory_bytes = f.memory_gb * 1e9;
  if (f.intra_gbps > 0) c.intra_busbw = f.intra_gbps * 1e9;
  if (f.inter_gbps > 0) c.inter_busbw = f.inter_gbps * 1e9;
  double peak_tflops = f.peak_tflops;
  bool fp32_peak = precision == plan::Precision::kFp32;
  if (peak_tflops <= 0 && c.name == "host") {
    // The float32 per-core GEMM rate `tessera doctor` measured (or TESSERA_PEAK_FLOPS).
    if (auto peak = runtime::profiling::find_peak_flops()) {
      peak_tflops = peak->flops_per_core / 1e12;
      c.peak_source = peak->source;
      fp32_peak = true;
    }
  } else if (peak_tflops > 0) {
    c.peak_source = "--peak-tflops";
  }
  if (peak_tflops > 0) {
    const double peak = peak_tflops * 1e12;
    // On the host the node's rate is its cores' rate: keep the core count.
    if (c.node_peak_flops > 0 && fp32_peak) c.node_peak_flops *= peak / c.peak_flops_fp32;
    if (fp32_peak) {
      c.peak_flops_16 *= peak / c.peak_flops_fp32;
      c.peak_flops_fp32 = peak;
    } else {
      c.peak_flops_16 = peak;
    }
  }
  if (f.mfu > 0) c.mfu = f.mfu;
  if (f.overlap) c.overlap = *f.overlap;
  if (f.price > 0) c.price_per_device_hour = f.price;
  c.validate();
  return c;
}

std::optional<bool> as_bool(const std::optional<int>& v, const char* flag) {
  if (!v) return std::nullopt;
  TS_CHECK_T(ConfigError, *v == 0 || *v == 1, flag, " takes 0 or 1 (got ", *v, ")");
  return *v == 1;
}

}  // namespace

int plan_command(const Args& args) {
  PlanFlags f;
  CLI::App app{"tessera plan: parallel layouts for a model on a cluster, ranked by predicted "
               "throughput, with memory per device, step time and training cost",
               "tessera plan"};
  add_flags(app, f);
  if (!parse_args(app, args, "tessera plan")) return 0;

  plan::PlanProblem problem;
  problem.precision = plan::parse_precision(
      !f.precision.empty() ? f.precision : (f.cluster == "host" ? "fp32" : "bf16"));
  problem.model = model_from(f);
  problem.cluster = cluster_from(f, problem.precision);
  problem.global_batch = f.global_batch;
  problem.state_layout = plan::parse_state_layout(f.model_states);
  problem.sequence_parallel = f.sequence_parallel;
  problem.validate();
  f.filter.offload = as_bool(f.offload, "--offload");
  f.filter.recompute = as_bool(f.recompute, "--recompute");

  const auto ranked = plan::search_layouts(problem, f.filter);
  TS_CHECK_T(ConfigError, !ranked.empty(), "no layout of ", problem.cluster.world(),
             " devices runs this model at global batch ", f.global_batch,
             " with the given filters: the batch must divide by dp, tp divide the heads, "
             "hidden size and vocabulary, pp the layers");
  plan::PlanReport report = plan::make_report(
      problem, ranked, f.all ? static_cast<int>(ranked.size()) : f.top,
      f.all ? -1 : f.max_oom);

  if (f.tokens > 0 || f.steps > 0) {
    const plan::Candidate* best = nullptr;
    for (const auto& c : ranked) {
      if (c.memory.fits()) {
        best = &c;
        break;
      }
    }
    if (best) {
      plan::CostInputs in;
      in.tokens_per_step = static_cast<double>(problem.global_batch) * problem.model.seq;
      in.step_seconds = best->time.total;
      in.devices = problem.cluster.world();
      in.tokens = f.tokens;
      in.steps = f.steps;
      in.price_per_device_hour = problem.cluster.price_per_device_hour;
      in.spot_discount = f.spot_discount;
      in.preemptions_per_day = f.preemptions;
      in.restart_seconds = f.restart_minutes * 60;
      in.checkpoint_interval = f.checkpoint_interval_minutes * 60;
      // Saving writes the float32 parameters and the optimizer state once,
      // every node's ranks writing their part in parallel.
      const auto sb = plan::state_bytes(problem.state_layout, problem.precision);
      const double ckpt_bytes = static_cast<double>(problem.model.total_params()) *
                                (sb.optimizer + (sb.param < 4 ? 0.0 : sb.param));
      in.checkpoint_seconds = f.checkpoint_seconds >= 0
                                  ? f.checkpoint_seconds
                                  : ckpt_bytes / (f.checkpoint_gbps * 1e9 * problem.cluster.nodes);
      report.cost = plan::estimate_training_cost(in);
      report.costed = *best;
    }
  }
  if (f.json) {
    std::printf("%s\n", plan::report_json(report).dump(2).c_str());
  } else {
    plan::print_report(stdout, report);
  }
  return 0;
}

}  // namespace tessera::cli
