#include "tessera/cli/plan/plan_report.h"

#include <cmath>
#include <string>

namespace tessera::cli::plan {

namespace {

constexpr double kGB = 1e9;

std::string duration(double seconds) {
  char buf[64];
  if (!std::isfinite(seconds)) return "never (preempted faster than it progresses)";
  if (seconds < 120) {
    std::snprintf(buf, sizeof(buf), "%.1f s", seconds);
  } else if (seconds < 3 * 3600) {
    std::snprintf(buf, sizeof(buf), "%.1f min", seconds / 60);
  } else if (seconds < 3 * 86400) {
    std::snprintf(buf, sizeof(buf), "%.1f h", seconds / 3600);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f days", seconds / 86400);
  }
  return buf;
}

void print_header(std::FILE* out, const PlanProblem& p) {
  const ModelSpec& m = p.model;
  const ClusterSpec& c = p.cluster;
  const StateBytes sb = state_bytes(p.state_layout, p.precision);
  std::fprintf(out,
               "model %s: %.3f B parameters (%lld layers, hidden %lld, %lld heads, seq %lld, "
               "vocab %lld)\n",
               m.name.c_str(), m.total_params() / 1e9, static_cast<long long>(m.layers),
               static_cast<long long>(m.hidden), static_cast<long long>(m.heads),
               static_cast<long long>(m.seq), static_cast<long long>(m.vocab));
  std::fprintf(out,
               "cluster %s: %d node(s) x %d devices, %.1f GB each, %.4g TFLOP/s %s per device "
               "(peak: %s) at MFU %.2f; busbw %.1f GB/s in a node, %.1f GB/s per device across "
               "nodes\n",
               c.name.c_str(), c.nodes, c.devices_per_node, c.memory_bytes / kGB,
               c.device_flops(p.precision) / 1e12, precision_name(p.precision),
               c.peak_source.c_str(), c.mfu,
               c.intra_busbw / kGB, c.inter_busbw / kGB);
  std::fprintf(out,
               "global batch %lld sequences (%.0f tokens), %s, model states %s (%g + %g + %g "
               "bytes per parameter)\n\n",
               static_cast<long long>(p.global_batch),
               static_cast<double>(p.global_batch) * m.seq, precision_name(p.precision),
               state_layout_name(p.state_layout), sb.param, sb.grad, sb.optimizer);
}

void print_costs(std::FILE* out, const PlanReport& r) {
  const TrainingCost& t = *r.cost;
  std::fprintf(out, "\ntraining with the first fitting layout (%s): %.0f steps\n",
               r.costed->layout.describe().c_str(), t.steps);
  std::fprintf(out, "  on demand: %s, cost %.0f\n", duration(t.seconds).c_str(), t.cost);
  if (!t.spot) return;
  std::fprintf(out, "  spot: a checkpoint takes %s, a restart %s, %.2f preemptions a day\n",
               duration(t.checkpoint_seconds).c_str(), duration(t.restart_seconds).c_str(),
               t.preemptions_per_day);
  const auto line = [&](const SpotEstimate& e, const char* note) {
    std::fprintf(out, "  spot, checkpoint every %-9s: %s, %.1f preemptions, cost %.0f%s\n",
                 duration(e.checkpoint_interval).c_str(), duration(e.seconds).c_str(),
                 e.preemptions, e.cost, note);
  };
  line(t.chosen, "  <- chosen");
  for (const auto& e : t.others) line(e, "");
}

}  // namespace

PlanReport make_report(const PlanProblem& problem, const std::vector<Candidate>& ranked, int top,
                       int max_oom) {
  PlanReport r;
  r.problem = problem;
  r.considered = static_cast<int>(ranked.size());
  int shown_fit = 0, shown_oom = 0;
  for (const Candidate& c : ranked) {
    if (c.memory.fits()) ++r.fitting;
  }
  for (const Candidate& c : ranked) {
    if (shown_fit >= top) break;
    if (c.memory.fits()) {
      ++shown_fit;
      r.shown.push_back(c);
    } else if (max_oom < 0 || (shown_fit == 0 && shown_oom < max_oom)) {
      ++shown_oom;
      r.shown.push_back(c);
    }
  }
  return r;
}

void print_report(std::FILE* out, const PlanReport& r) {
  print_header(out, r.problem);
  std::fprintf(out,
               "%3s  %-36s %8s %8s %8s %8s %5s %9s %11s %5s | %8s %7s %7s %7s %7s %7s %7s %7s\n",
               "#", "layout", "states", "activ.", "buffers", "total", "fits", "step (s)",
               "tokens/s", "MFU", "compute", "bubble", "tp", "cp", "ep", "pp", "dp", "optim");
  int rank = 0;
  for (const Candidate& c : r.shown) {
    const MemoryEstimate& m = c.memory;
    const StepTime& t = c.time;
    std::fprintf(out,
                 "%3d  %-36s %8.2f %8.2f %8.2f %8.2f %5s %9.4g %11.4g %5.2f | %8.3g %7.2g %7.2g "
                 "%7.2g %7.2g %7.2g %7.2g %7.2g\n",
                 ++rank, c.layout.describe().c_str(), m.model_states() / kGB,
                 m.activations / kGB, m.transient / kGB, m.total() / kGB,
                 m.fits() ? "yes" : "NO", t.total, c.tokens_per_second, c.step_mfu, t.compute,
                 t.bubble, t.tp_comm, t.cp_comm, t.ep_comm, t.pp_comm, t.dp_exposed + t.zero_copies,
                 t.optimizer);
  }
  std::fprintf(out,
               "\n%d layouts weighed, %d fit in %.1f GB (%.0f%% of each device); memory in GB "
               "per device, time in seconds per step (dp: exposed after overlap, with ZeRO's "
               "buffer copies)\n",
               r.considered, r.fitting, r.shown.empty() ? 0.0 : r.shown[0].memory.usable / kGB,
               r.problem.memory_headroom * 100);
  if (r.fitting == 0) {
    std::fprintf(out,
                 "no layout fits: add devices, lower --global-batch or the sequence length, "
                 "or use a larger-memory cluster\n");
  }
  if (r.cost) print_costs(out, r);
}

nlohmann::json report_json(const PlanReport& r) {
  using nlohmann::json;
  const PlanProblem& p = r.problem;
  json layouts = json::array();
  for (const Candidate& c : r.shown) {
    const Layout& l = c.layout;
    layouts.push_back({
        {"layout", l.describe()}, {"dp", l.dp}, {"tp", l.tp}, {"cp", l.cp}, {"ep", l.ep},
        {"pp", l.pp},
        {"vp", l.vp},
        {"zero", l.zero}, {"offload", l.offload}, {"recompute", l.recompute},
        {"micro_batch", l.micro_batch}, {"micro_batches", l.micro_batches},
        {"fits", c.memory.fits()},
        {"memory_bytes",
         {{"params", c.memory.params}, {"grads", c.memory.grads},
          {"optimizer", c.memory.optimizer}, {"model_states", c.memory.model_states()},
          {"activations", c.memory.activations}, {"transient", c.memory.transient},
          {"total", c.memory.total()}, {"usable", c.memory.usable}}},
        {"step_seconds",
         {{"total", c.time.total}, {"compute", c.time.compute}, {"bubble", c.time.bubble},
          {"tp_comm", c.time.tp_comm}, {"cp_comm", c.time.cp_comm}, {"ep_comm", c.time.ep_comm},
          {"pp_comm", c.time.pp_comm},
          {"dp_comm", c.time.dp_comm}, {"dp_exposed", c.time.dp_exposed},
          {"zero_copies", c.time.zero_copies},
          {"optimizer", c.time.optimizer}}},
        {"step_flops", c.time.flops},
        {"tokens_per_second", c.tokens_per_second}, {"mfu", c.step_mfu}});
  }
  json out = {
      {"model",
       {{"name", p.model.name}, {"params", p.model.total_params()}, {"layers", p.model.layers},
        {"hidden", p.model.hidden}, {"heads", p.model.heads}, {"seq", p.model.seq},
        {"vocab", p.model.vocab}, {"experts", p.model.experts}, {"topk", p.model.topk},
        {"expert_hidden", p.model.expert_width()}}},
      {"cluster",
       {{"name", p.cluster.name}, {"nodes", p.cluster.nodes},
        {"devices_per_node", p.cluster.devices_per_node},
        {"memory_bytes", p.cluster.memory_bytes},
        {"device_flops", p.cluster.device_flops(p.precision)},
        {"peak_source", p.cluster.peak_source}, {"mfu", p.cluster.mfu},
        {"intra_busbw", p.cluster.intra_busbw}, {"inter_busbw", p.cluster.inter_busbw},
        {"overlap", p.cluster.overlap}}},
      {"global_batch", p.global_batch},
      {"precision", precision_name(p.precision)},
      {"model_states", state_layout_name(p.state_layout)},
      {"considered", r.considered},
      {"fitting", r.fitting},
      {"layouts", layouts}};
  if (r.cost) {
    const TrainingCost& t = *r.cost;
    const auto spot = [](const SpotEstimate& e) {
      return json{{"checkpoint_interval_seconds", e.checkpoint_interval},
                  {"seconds", std::isfinite(e.seconds) ? json(e.seconds) : json(nullptr)},
                  {"cost", std::isfinite(e.cost) ? json(e.cost) : json(nullptr)},
                  {"preemptions", std::isfinite(e.preemptions) ? json(e.preemptions)
                                                               : json(nullptr)},
                  {"lost_per_preemption_seconds", e.lost_per_preemption}};
    };
    json cost = {{"layout", r.costed->layout.describe()}, {"steps", t.steps},
                 {"checkpoint_seconds", t.checkpoint_seconds},
                 {"restart_seconds", t.restart_seconds},
                 {"seconds", t.seconds}, {"cost", t.cost}};
    if (t.spot) {
      cost["spot"] = spot(t.chosen);
      json others = json::array();
      for (const auto& e : t.others) others.push_back(spot(e));
      cost["spot_intervals"] = others;
    }
    out["training"] = cost;
  }
  return out;
}

}  // namespace tessera::cli::plan
