// Pipeline-parallel schedules as data: for each pipeline stage (rank in the pp
// group), the complete, ordered list of what it does in one optimizer step. An
// executor runs each list strictly in order; the generators here decide all the
// ordering, so schedules are checked without processes (validate_schedule).
//
// The model is cut into p * v chunks ("virtual stages"). Stage s holds chunks
// c = 0..v-1, which are virtual stages k = c * p + s; v = 1 except for the
// interleaved schedule. Micro-batch i flows forward through virtual stages
// 0..p*v-1 and its gradient flows back from p*v-1 to 0.
//
// Ordering rules every generated schedule obeys (validate_schedule checks them):
//   - each (micro-batch, chunk) is forwarded once and backwarded once, later;
//   - a forward on a non-first virtual stage has its kRecvActivation earlier in
//     the list, a forward on a non-last one has its kSendActivation later;
//     likewise kRecvGrad before and kSendGrad after a backward;
//   - when both ends of a hand-off live on one stage (p == 1 with v > 1) there
//     is no send/recv: the later chunk reads the earlier chunk's output;
//   - every list ends with kReduceGrads then kOptimizerStep.
//
// Send/recv semantics the executor may assume: messages between one ordered
// pair of stages (from, to) are matched first-to-first (FIFO), like same-tag
// pairwise send/recv in Gloo or the shm backend; the n-th send from a to b is
// the n-th recv on b from a, and carries the same micro-batch. A send may block
// until its recv is posted (rendezvous). The order is chosen so that it cannot
// deadlock even then: every message has a place in one global order and each
// stage performs its sends and recvs in that order, so the earliest unfinished
// message always has both ends at the head of their lists. In particular the
// two directions between neighbours are never "both send first". Activations
// and gradients share the (from, to) order, so one channel per ordered pair or
// one per (pair, kind) both match. A recv may come several instructions before
// the computation that consumes it: keep received tensors by (kind, micro-batch,
// chunk) until then.
//
// Where the order has a choice, it follows an idealized timeline (forward 1,
// backward 2 time units, free communication): a send/recv sits where both ends
// are between computations at the same time, so blocking costs no time there.
//
// 1F1B for p = 4, m = 8 on that timeline (digits: forward of that micro-batch,
// letters: its backward, a = 0, b = 1, ...; one column per time unit; "." idle):
//
//   stage 0  0123......aa4bb5cc6dd7ee.ff.gg.hh
//   stage 1  .012....aa3bb4cc5dd6ee7ff.gg.hh
//   stage 2  ..01..aa2bb3cc4dd5ee6ff7gg.hh
//   stage 3  ...0aa1bb2cc3dd4ee5ff6gg7hh
//
// Bubble: each stage computes for m (f + b) and the pipeline fills and drains in
// (p - 1) (f + b) / v, so the idle fraction of total stage-time is
// (p - 1) / (v m + p - 1) (bubble_formula): the same for GPipe and 1F1B, divided
// roughly by v with interleaving. The generated schedules reach it exactly on the
// unit-time timeline. GPipe holds m micro-batches' activations per stage, 1F1B at
// most p, interleaved at most p v chunk activations (p micro-batches' worth).
//
// Pure functions of their arguments: no communication, no state, thread-safe.
// Bad sizes are ConfigErrors naming the config key (micro-batches per step come
// from gradient_accumulation_steps); a broken schedule is a tessera::Error.
#pragma once

#include <string>
#include <vector>

namespace tessera::parallel {

enum class PipeOp {
  kForward,
  kBackward,
  kSendActivation,
  kRecvActivation,
  kSendGrad,
  kRecvGrad,
  kReduceGrads,
  kOptimizerStep,
};

struct PipeInstruction {
  PipeOp op = PipeOp::kForward;
  // -1 for kReduceGrads and kOptimizerStep, which cover the whole step.
  int micro_batch = -1;
  // Model chunk on this stage (0 unless interleaved): for a send, the chunk that
  // produced the tensor; for a recv, the chunk that will consume it. -1 for
  // kReduceGrads and kOptimizerStep.
  int chunk = -1;
  // For send/recv: the pipeline stage (rank in the pp group) at the other end;
  // -1 otherwise.
  int peer_stage = -1;

  bool operator==(const PipeInstruction& o) const {
    return op == o.op && micro_batch == o.micro_batch && chunk == o.chunk &&
           peer_stage == o.peer_stage;
  }
  bool operator!=(const PipeInstruction& o) const { return !(*this == o); }
};

// "forward", "send_activation", ...
std::string to_string(PipeOp op);
// "forward mb 3 chunk 0", "send_activation mb 3 chunk 0 to stage 2", "reduce_grads".
std::string to_string(const PipeInstruction& ins);

// One instruction list per pipeline stage; index = pp rank.
using PipeSchedule = std::vector<std::vector<PipeInstruction>>;

// All forwards, then all backwards in micro-batch order: the bubble of 1F1B,
// but every stage keeps m micro-batches of activations.
PipeSchedule gpipe_schedule(int p, int m);

// PipeDream-flush / Megatron 1F1B: stage s runs min(p - s - 1, m) warm-up
// forwards, then alternates one forward and one backward, then drains the
// remaining backwards. Same bubble as GPipe, at most p live activations.
PipeSchedule one_f_one_b_schedule(int p, int m);

// Megatron's interleaved 1F1B with v chunks per stage: forwards go through a
// stage's chunks in groups of p micro-batches, then 1F1B with the chunks of the
// backwards reversed. The bubble shrinks by about v for v times as many
// messages. Stage s warms up with (v - 1) p + p - s - 1 forwards, p - s - 1 fewer
// than Megatron, which keeps the pipeline full with backward = 2 forwards and
// holds fewer activations. Needs m % p == 0 (ConfigError naming both numbers).
// v == 1 means no interleaving and returns one_f_one_b_schedule(p, m), which has
// no divisibility requirement.
PipeSchedule interleaved_schedule(int p, int m, int v);

// name: "gpipe", "1f1b" or "interleaved". v (virtual_pipeline_model_parallel_size)
// must be 1 for gpipe and 1f1b. ConfigError for an unknown name or bad sizes.
PipeSchedule make_pipeline_schedule(const std::string& name, int p, int m, int v);

// Throws tessera::Error naming the stage and instruction index if the schedule
// breaks a rule above: a (micro-batch, chunk) forward missing or duplicated, a
// backward missing or before its forward, a send or recv missing, misplaced or
// aimed at the wrong stage, sends and recvs between two stages that do not
// pair up in order, a list not ending with kReduceGrads, kOptimizerStep; or if
// it deadlocks when every send/recv is a blocking rendezvous (the strictest
// executor). ConfigError for bad sizes.
void validate_schedule(const PipeSchedule& schedule, int p, int m, int v);

struct ScheduleStats {
  // Max over stages of (micro-batch, chunk) pairs forwarded but not yet
  // backwarded: activation memory in units of one chunk's micro-batch.
  int max_live_activations = 0;
  // 1 - busy / (p * makespan), executing the lists with blocking rendezvous,
  // forward = 1 and backward = 2 time units per chunk and free communication.
  // (Scaling chunk costs by 1/v, as a chunk is 1/v of a stage, leaves the
  // fraction unchanged.)
  double bubble_fraction = 0.0;
};

// Validates the schedule first (throws what validate_schedule throws).
ScheduleStats schedule_stats(const PipeSchedule& schedule, int p, int m, int v);

// The idle fraction of total stage-time, (p - 1) / (v * m + p - 1): a stage
// computes v * m chunk-slots (one chunk's forward and backward each) and waits
// p - 1 of them while the pipeline fills and drains. Megatron states it relative
// to the ideal time instead, (p - 1) / (v * m). schedule_stats matches it exactly
// for all three generators with uniform stage costs.
double bubble_formula(int p, int m, int v = 1);

}  // namespace tessera::parallel
