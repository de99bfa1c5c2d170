#include "tessera/parallel/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <tuple>

#include "tessera/core/check.h"

namespace tessera::parallel {
namespace {

constexpr int kForwardCost = 1;
constexpr int kBackwardCost = 2;

// Where virtual stages live: chunk c of stage s is virtual stage c * p + s.
struct Layout {
  int p, m, v;
  int virtual_stages() const { return p * v; }
  int virtual_stage(int stage, int chunk) const { return chunk * p + stage; }
  int stage_of(int k) const { return k % p; }
  int chunk_of(int k) const { return k / p; }
};

void check_sizes(int p, int m, int v) {
  TS_CHECK_T(ConfigError, p >= 1, "pipeline_model_parallel_size must be >= 1, got ", p);
  TS_CHECK_T(ConfigError, m >= 1,
             "gradient_accumulation_steps (the micro-batches per pipeline step) must be >= 1, got ",
             m);
  TS_CHECK_T(ConfigError, v >= 1, "virtual_pipeline_model_parallel_size must be >= 1, got ", v);
}

bool is_compute(PipeOp op) { return op == PipeOp::kForward || op == PipeOp::kBackward; }
bool is_send(PipeOp op) { return op == PipeOp::kSendActivation || op == PipeOp::kSendGrad; }
bool is_recv(PipeOp op) { return op == PipeOp::kRecvActivation || op == PipeOp::kRecvGrad; }

// ---- Generation: a compute order per stage, then sends/recvs placed around it.

struct Compute {
  bool forward;
  int micro;
  int chunk;
};
using ComputeOrder = std::vector<std::vector<Compute>>;

struct Span {
  int start, finish;
};

// Index of (forward/backward, micro-batch, virtual stage) into flat tables.
struct OpIndex {
  Layout l;
  int operator()(bool forward, int micro, int k) const {
    return ((forward ? 0 : 1) * l.m + micro) * l.virtual_stages() + k;
  }
  int size() const { return 2 * l.m * l.virtual_stages(); }
};

// Earliest start of every computation when each stage runs its order and waits
// only for the data it needs.
std::vector<std::vector<Span>> asap_timeline(const ComputeOrder& order, const Layout& l) {
  const OpIndex idx{l};
  std::vector<int> finish(idx.size(), -1);
  std::vector<std::vector<Span>> spans(l.p);
  std::vector<int> clock(l.p, 0);
  size_t left = 0;
  for (const auto& o : order) left += o.size();
  while (left > 0) {
    bool progressed = false;
    for (int s = 0; s < l.p; ++s) {
      while (spans[s].size() < order[s].size()) {
        const Compute& c = order[s][spans[s].size()];
        const int k = l.virtual_stage(s, c.chunk);
        int dep = 0;  // the first virtual stage's forward and the last's backward need nothing
        if (c.forward && k > 0) dep = finish[idx(true, c.micro, k - 1)];
        if (!c.forward && k + 1 < l.virtual_stages()) dep = finish[idx(false, c.micro, k + 1)];
        if (dep < 0) break;
        if (!c.forward) TS_INTERNAL_ASSERT(finish[idx(true, c.micro, k)] >= 0);
        const int ready = std::max(clock[s], dep);
        const int end = ready + (c.forward ? kForwardCost : kBackwardCost);
        spans[s].push_back({ready, end});
        finish[idx(c.forward, c.micro, k)] = clock[s] = end;
        --left;
        progressed = true;
      }
    }
    TS_INTERNAL_ASSERT(progressed, "the compute order of the pipeline schedule is cyclic");
  }
  return spans;
}

bool idle_at(const std::vector<Span>& spans, int t) {
  return std::none_of(spans.begin(), spans.end(),
                      [t](const Span& s) { return s.start < t && t < s.finish; });
}

// The first time in [ready, deadline] at which both ends are between
// computations, so a blocking hand-off there delays neither; `ready` if none.
int rendezvous_time(int ready, int deadline, const std::vector<Span>& a,
                    const std::vector<Span>& b) {
  std::vector<int> candidates{ready};
  for (const auto* spans : {&a, &b})
    for (const Span& s : *spans)
      if (s.finish > ready && s.finish <= deadline) candidates.push_back(s.finish);
  std::sort(candidates.begin(), candidates.end());
  for (int t : candidates)
    if (idle_at(a, t) && idle_at(b, t)) return t;
  return ready;
}

// An instruction with its place in the global order: computations by finish
// time; messages by hand-off time, after computations ending then, and among
// themselves by an identity both ends compute alike. Sorting each stage's list
// by this key makes every stage meet its messages in one global order, which is
// what rules out a rendezvous deadlock.
struct Placed {
  std::tuple<int, int, std::array<int, 5>> key;
  PipeInstruction ins;
};

PipeSchedule lower(const ComputeOrder& order, const Layout& l) {
  const auto spans = asap_timeline(order, l);
  const OpIndex idx{l};
  std::vector<std::pair<int, int>> where(idx.size());  // (stage, position)
  for (int s = 0; s < l.p; ++s)
    for (size_t j = 0; j < order[s].size(); ++j) {
      const Compute& c = order[s][j];
      where[idx(c.forward, c.micro, l.virtual_stage(s, c.chunk))] = {s, static_cast<int>(j)};
    }

  std::vector<std::vector<Placed>> placed(l.p);
  for (int s = 0; s < l.p; ++s) {
    for (size_t j = 0; j < order[s].size(); ++j) {
      const Compute& c = order[s][j];
      const PipeOp op = c.forward ? PipeOp::kForward : PipeOp::kBackward;
      placed[s].push_back({{spans[s][j].finish, 0, {}}, {op, c.micro, c.chunk, -1}});
      const int k = l.virtual_stage(s, c.chunk);
      const int next = c.forward ? k + 1 : k - 1;
      if (next < 0 || next >= l.virtual_stages() || l.stage_of(next) == s) continue;
      const auto [r, rj] = where[idx(c.forward, c.micro, next)];
      const int t = rendezvous_time(spans[s][j].finish, spans[r][rj].start, spans[s], spans[r]);
      const std::array<int, 5> id{s, r, c.forward ? 0 : 1, c.micro, k};
      placed[s].push_back(
          {{t, 1, id},
           {c.forward ? PipeOp::kSendActivation : PipeOp::kSendGrad, c.micro, c.chunk, r}});
      placed[r].push_back({{t, 1, id},
                           {c.forward ? PipeOp::kRecvActivation : PipeOp::kRecvGrad, c.micro,
                            l.chunk_of(next), s}});
    }
  }

  PipeSchedule out(l.p);
  for (int s = 0; s < l.p; ++s) {
    std::sort(placed[s].begin(), placed[s].end(),
              [](const Placed& a, const Placed& b) { return a.key < b.key; });
    for (const Placed& x : placed[s]) out[s].push_back(x.ins);
    out[s].push_back({PipeOp::kReduceGrads, -1, -1, -1});
    out[s].push_back({PipeOp::kOptimizerStep, -1, -1, -1});
  }
  return out;
}

ComputeOrder gpipe_order(const Layout& l) {
  ComputeOrder order(l.p);
  for (auto& stage : order) {
    for (int i = 0; i < l.m; ++i) stage.push_back({true, i, 0});
    for (int i = 0; i < l.m; ++i) stage.push_back({false, i, 0});
  }
  return order;
}

ComputeOrder one_f_one_b_order(const Layout& l) {
  ComputeOrder order(l.p);
  for (int s = 0; s < l.p; ++s) {
    // A stage can start backwards only once micro-batch 0 has gone through the
    // p - s - 1 stages after it; forwarding meanwhile fills that wait.
    const int warmup = std::min(l.p - s - 1, l.m);
    for (int i = 0; i < warmup; ++i) order[s].push_back({true, i, 0});
    for (int i = 0; i < l.m - warmup; ++i) {
      order[s].push_back({true, warmup + i, 0});
      order[s].push_back({false, i, 0});
    }
    for (int i = l.m - warmup; i < l.m; ++i) order[s].push_back({false, i, 0});
  }
  return order;
}

// A stage's n-th forward runs chunk (n / p) % v on micro-batch (n / (p v)) p + n % p:
// p micro-batches go through one chunk before the next chunk starts, so the
// downstream stages get work early. Backwards do the same with chunks reversed.
ComputeOrder interleaved_order(const Layout& l) {
  const int group = l.p * l.v;
  const int total = l.m * l.v;
  auto nth = [&](int n, bool forward) -> Compute {
    const int c = (n % group) / l.p;
    return {forward, (n / group) * l.p + n % l.p, forward ? c : l.v - 1 - c};
  };
  ComputeOrder order(l.p);
  for (int s = 0; s < l.p; ++s) {
    // The first backward (last chunk, micro-batch 0) can start once micro-batch
    // 0 has crossed chunks 0..v-2 of the whole pipeline ((v - 1) p forwards
    // here) and the p - s - 1 stages after this one. Megatron warms up
    // 2 (p - s - 1) forwards past the first; on the unit-time timeline (backward =
    // two forwards) those extra ones hold more activations and leave idle time
    // for p = 2, 5 and 8 (of 1..8), while p - s - 1 keeps every stage busy.
    const int warmup = std::min((l.v - 1) * l.p + (l.p - s - 1), total);
    for (int n = 0; n < warmup; ++n) order[s].push_back(nth(n, true));
    for (int n = 0; n + warmup < total; ++n) {
      order[s].push_back(nth(n + warmup, true));
      order[s].push_back(nth(n, false));
    }
    for (int n = total - warmup; n < total; ++n) order[s].push_back(nth(n, false));
  }
  return order;
}

// ---- Validation and simulation.

std::string at(int stage, size_t j, const PipeInstruction& ins) {
  return c10::str("pipeline schedule: stage ", stage, ", instruction ", j, " (", to_string(ins),
                  ")");
}

int cost(PipeOp op) {
  return op == PipeOp::kForward ? kForwardCost : op == PipeOp::kBackward ? kBackwardCost : 0;
}

// Whether `recv` on the peer is the other end of `send` issued by stage `from`.
bool pairs_with(const Layout& l, int from, const PipeInstruction& send,
                const PipeInstruction& recv) {
  const bool act = send.op == PipeOp::kSendActivation;
  if (recv.op != (act ? PipeOp::kRecvActivation : PipeOp::kRecvGrad)) return false;
  if (recv.micro_batch != send.micro_batch) return false;
  return recv.chunk == l.chunk_of(l.virtual_stage(from, send.chunk) + (act ? 1 : -1));
}

// Positions of what has happened to one (micro-batch, chunk) on a stage.
enum Slot { kFwd, kBwd, kActIn, kActOut, kGradIn, kGradOut, kSlots };

Slot slot_of(PipeOp op) {
  switch (op) {
    case PipeOp::kForward:
      return kFwd;
    case PipeOp::kBackward:
      return kBwd;
    case PipeOp::kRecvActivation:
      return kActIn;
    case PipeOp::kSendActivation:
      return kActOut;
    case PipeOp::kRecvGrad:
      return kGradIn;
    default:
      return kGradOut;
  }
}

// Per (micro-batch, chunk) of a stage: where each Slot happened, -1 if not yet.
struct Seen {
  const Layout& l;
  std::vector<std::array<int, kSlots>> at;
  explicit Seen(const Layout& layout) : l(layout), at(layout.m * layout.v) {
    for (auto& x : at) x.fill(-1);
  }
  std::array<int, kSlots>& operator()(int micro, int chunk) { return at[micro * l.v + chunk]; }
};

// One instruction in its stage's list: fields in range, not repeated, its input
// before it and, for a send, the computation that produced the tensor.
void check_instruction(const PipeInstruction& ins, size_t j, int s, const Layout& l, Seen& seen) {
  TS_CHECK(ins.op != PipeOp::kReduceGrads && ins.op != PipeOp::kOptimizerStep, at(s, j, ins),
           ": must be one of the last two instructions");
  TS_CHECK(ins.micro_batch >= 0 && ins.micro_batch < l.m && ins.chunk >= 0 && ins.chunk < l.v,
           at(s, j, ins), ": micro-batch must be in [0, ", l.m, ") and chunk in [0, ", l.v, ")");
  TS_CHECK(is_compute(ins.op) == (ins.peer_stage == -1), at(s, j, ins),
           is_compute(ins.op) ? ": a computation has no peer stage" : ": names no peer stage");
  auto& st = seen(ins.micro_batch, ins.chunk);
  int& slot = st[slot_of(ins.op)];
  TS_CHECK(slot < 0, at(s, j, ins), ": repeats instruction ", slot);
  slot = static_cast<int>(j);
  const int k = l.virtual_stage(s, ins.chunk);
  const bool has_prev = k > 0, has_next = k + 1 < l.virtual_stages();
  const bool remote_prev = has_prev && l.stage_of(k - 1) != s;
  const bool remote_next = has_next && l.stage_of(k + 1) != s;
  switch (ins.op) {
    case PipeOp::kForward:
      if (remote_prev)
        TS_CHECK(st[kActIn] >= 0, at(s, j, ins), ": no recv_activation from stage ",
                 l.stage_of(k - 1), " before it");
      else if (has_prev)
        TS_CHECK(seen(ins.micro_batch, l.chunk_of(k - 1))[kFwd] >= 0, at(s, j, ins),
                 ": the forward of chunk ", l.chunk_of(k - 1), " must come first");
      break;
    case PipeOp::kBackward:
      TS_CHECK(st[kFwd] >= 0, at(s, j, ins), ": the backward comes before its forward");
      if (remote_next)
        TS_CHECK(st[kGradIn] >= 0, at(s, j, ins), ": no recv_grad from stage ", l.stage_of(k + 1),
                 " before it");
      else if (has_next)
        TS_CHECK(seen(ins.micro_batch, l.chunk_of(k + 1))[kBwd] >= 0, at(s, j, ins),
                 ": the backward of chunk ", l.chunk_of(k + 1), " must come first");
      break;
    case PipeOp::kSendActivation:
    case PipeOp::kRecvGrad:  // with the next virtual stage
      TS_CHECK(remote_next && ins.peer_stage == l.stage_of(k + 1), at(s, j, ins),
               remote_next ? c10::str(": the next virtual stage lives on stage ", l.stage_of(k + 1))
                           : std::string(": there is no next virtual stage on another stage"));
      if (ins.op == PipeOp::kSendActivation)
        TS_CHECK(st[kFwd] >= 0, at(s, j, ins), ": sent before its forward");
      break;
    default:  // kRecvActivation, kSendGrad: with the previous virtual stage
      TS_CHECK(remote_prev && ins.peer_stage == l.stage_of(k - 1), at(s, j, ins),
               remote_prev
                   ? c10::str(": the previous virtual stage lives on stage ", l.stage_of(k - 1))
                   : std::string(": there is no previous virtual stage on another stage"));
      if (ins.op == PipeOp::kSendGrad)
        TS_CHECK(st[kBwd] >= 0, at(s, j, ins), ": sent before its backward");
  }
}

// Checks one stage's list on its own: every instruction, then that nothing is
// missing and the step comes last.
void check_stage(const std::vector<PipeInstruction>& list, int s, const Layout& l) {
  const size_t n = list.size();
  TS_CHECK(
      n >= 2 && list[n - 2].op == PipeOp::kReduceGrads && list[n - 1].op == PipeOp::kOptimizerStep,
      "pipeline schedule: stage ", s, " must end with reduce_grads, optimizer_step");
  Seen seen(l);
  for (size_t j = 0; j + 2 < n; ++j) check_instruction(list[j], j, s, l, seen);
  for (int i = 0; i < l.m; ++i)
    for (int c = 0; c < l.v; ++c) {
      const auto& st = seen(i, c);
      const int k = l.virtual_stage(s, c);
      const auto what = c10::str("pipeline schedule: stage ", s, ": micro-batch ", i, " chunk ", c);
      TS_CHECK(st[kFwd] >= 0, what, " is never forwarded");
      TS_CHECK(st[kBwd] >= 0, what, " is never backwarded");
      TS_CHECK(k + 1 == l.virtual_stages() || l.stage_of(k + 1) == s || st[kActOut] >= 0, what,
               ": its activation is never sent to stage ", l.stage_of(k + 1));
      TS_CHECK(k == 0 || l.stage_of(k - 1) == s || st[kGradOut] >= 0, what,
               ": its input gradient is never sent to stage ", l.stage_of(k - 1));
    }
}

// The n-th send from a to b must be the n-th recv on b from a.
void check_pairs(const PipeSchedule& sch, const Layout& l) {
  auto positions = [&](int stage, int peer, bool send) {
    std::vector<size_t> out;
    for (size_t j = 0; j < sch[stage].size(); ++j) {
      const PipeInstruction& ins = sch[stage][j];
      if ((send ? is_send(ins.op) : is_recv(ins.op)) && ins.peer_stage == peer) out.push_back(j);
    }
    return out;
  };
  for (int a = 0; a < l.p; ++a)
    for (int b = 0; b < l.p; ++b) {
      if (a == b) continue;
      const auto sends = positions(a, b, true), recvs = positions(b, a, false);
      for (size_t n = 0; n < std::min(sends.size(), recvs.size()); ++n) {
        const auto& send = sch[a][sends[n]];
        const auto& recv = sch[b][recvs[n]];
        TS_CHECK(pairs_with(l, a, send, recv), at(a, sends[n], send), " is message ", n,
                 " from stage ", a, " to stage ", b, ", but stage ", b, "'s receive ", n,
                 " from stage ", a, " is instruction ", recvs[n], " (", to_string(recv),
                 "); both ends must order their messages alike");
      }
      TS_CHECK(sends.size() == recvs.size(), "pipeline schedule: stage ", a, " sends ",
               sends.size(), " messages to stage ", b, " but stage ", b, " receives ", recvs.size(),
               " from stage ", a);
    }
}

struct Run {
  std::vector<size_t> pos;
  std::vector<long> clock;
  bool finished = false;
};

// Executes the lists with every send/recv a blocking rendezvous that takes no
// time, computations taking their unit cost. The result does not depend on the
// order stages are visited in: each hand-off's time is fixed by its two ends.
Run run_rendezvous(const PipeSchedule& sch, const Layout& l) {
  Run r{std::vector<size_t>(l.p, 0), std::vector<long>(l.p, 0)};
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int a = 0; a < l.p; ++a) {
      while (r.pos[a] < sch[a].size()) {
        const PipeInstruction& ins = sch[a][r.pos[a]];
        if (!is_send(ins.op) && !is_recv(ins.op)) {
          r.clock[a] += cost(ins.op);
          ++r.pos[a];
          progressed = true;
          continue;
        }
        const int b = ins.peer_stage;
        if (b < 0 || b >= l.p || b == a || r.pos[b] >= sch[b].size()) break;
        const PipeInstruction& other = sch[b][r.pos[b]];
        const bool meet = other.peer_stage == a &&
                          (is_send(ins.op) ? is_recv(other.op) && pairs_with(l, a, ins, other)
                                           : is_send(other.op) && pairs_with(l, b, other, ins));
        if (!meet) break;
        r.clock[a] = r.clock[b] = std::max(r.clock[a], r.clock[b]);
        ++r.pos[a];
        ++r.pos[b];
        progressed = true;
      }
    }
  }
  r.finished = true;
  for (int s = 0; s < l.p; ++s) r.finished = r.finished && r.pos[s] == sch[s].size();
  return r;
}

void check_no_deadlock(const PipeSchedule& sch, const Layout& l) {
  const Run r = run_rendezvous(sch, l);
  if (r.finished) return;
  std::string stuck;
  for (int s = 0; s < l.p; ++s) {
    if (r.pos[s] == sch[s].size()) continue;
    stuck += c10::str(stuck.empty() ? "" : "; ", "stage ", s, " waits at instruction ", r.pos[s],
                      " (", to_string(sch[s][r.pos[s]]), ")");
  }
  TS_THROW(Error, "pipeline schedule deadlocks with blocking send/recv: ", stuck,
           ". Every stage must meet its messages in one global order (never two neighbours "
           "both sending first)");
}

}  // namespace

std::string to_string(PipeOp op) {
  switch (op) {
    case PipeOp::kForward:
      return "forward";
    case PipeOp::kBackward:
      return "backward";
    case PipeOp::kSendActivation:
      return "send_activation";
    case PipeOp::kRecvActivation:
      return "recv_activation";
    case PipeOp::kSendGrad:
      return "send_grad";
    case PipeOp::kRecvGrad:
      return "recv_grad";
    case PipeOp::kReduceGrads:
      return "reduce_grads";
    case PipeOp::kOptimizerStep:
      return "optimizer_step";
  }
  return "unknown";
}

std::string to_string(const PipeInstruction& ins) {
  std::string out = to_string(ins.op);
  if (ins.op == PipeOp::kReduceGrads || ins.op == PipeOp::kOptimizerStep) return out;
  out += c10::str(" mb ", ins.micro_batch, " chunk ", ins.chunk);
  if (is_send(ins.op)) out += c10::str(" to stage ", ins.peer_stage);
  if (is_recv(ins.op)) out += c10::str(" from stage ", ins.peer_stage);
  return out;
}

PipeSchedule gpipe_schedule(int p, int m) {
  check_sizes(p, m, 1);
  const Layout l{p, m, 1};
  return lower(gpipe_order(l), l);
}

PipeSchedule one_f_one_b_schedule(int p, int m) {
  check_sizes(p, m, 1);
  const Layout l{p, m, 1};
  return lower(one_f_one_b_order(l), l);
}

PipeSchedule interleaved_schedule(int p, int m, int v) {
  check_sizes(p, m, v);
  if (v == 1) return one_f_one_b_schedule(p, m);
  TS_CHECK_T(ConfigError, m % p == 0, "the interleaved pipeline schedule needs ",
             "gradient_accumulation_steps (", m, ") to be a multiple of ",
             "pipeline_model_parallel_size (", p, "); use ", (m / p + 1) * p,
             ", or the 1f1b schedule");
  const Layout l{p, m, v};
  return lower(interleaved_order(l), l);
}

PipeSchedule make_pipeline_schedule(const std::string& name, int p, int m, int v) {
  check_sizes(p, m, v);
  if (name == "interleaved") return interleaved_schedule(p, m, v);
  TS_CHECK_T(ConfigError, name == "gpipe" || name == "1f1b", "unknown pipeline schedule \"", name,
             "\"; valid: gpipe, 1f1b, interleaved");
  TS_CHECK_T(ConfigError, v == 1, "virtual_pipeline_model_parallel_size ", v,
             " needs the interleaved pipeline schedule, not ", name, "; set it to 1");
  return name == "gpipe" ? gpipe_schedule(p, m) : one_f_one_b_schedule(p, m);
}

void validate_schedule(const PipeSchedule& schedule, int p, int m, int v) {
  check_sizes(p, m, v);
  TS_CHECK(static_cast<int>(schedule.size()) == p, "pipeline schedule has ", schedule.size(),
           " stage lists, expected one per stage of pipeline_model_parallel_size ", p);
  const Layout l{p, m, v};
  for (int s = 0; s < p; ++s) check_stage(schedule[s], s, l);
  check_pairs(schedule, l);
  check_no_deadlock(schedule, l);
}

ScheduleStats schedule_stats(const PipeSchedule& schedule, int p, int m, int v) {
  validate_schedule(schedule, p, m, v);
  const Run r = run_rendezvous(schedule, Layout{p, m, v});
  ScheduleStats stats;
  long busy = 0;
  for (const auto& list : schedule) {
    int live = 0;
    for (const PipeInstruction& ins : list) {
      busy += cost(ins.op);
      live += ins.op == PipeOp::kForward ? 1 : ins.op == PipeOp::kBackward ? -1 : 0;
      stats.max_live_activations = std::max(stats.max_live_activations, live);
    }
  }
  const long makespan = *std::max_element(r.clock.begin(), r.clock.end());
  stats.bubble_fraction = 1.0 - static_cast<double>(busy) / (static_cast<double>(p) * makespan);
  return stats;
}

double bubble_formula(int p, int m, int v) {
  check_sizes(p, m, v);
  return static_cast<double>(p - 1) / (static_cast<double>(v) * m + p - 1);
}

}  // namespace tessera::parallel
