// Pipeline schedules as data: every generator's output over a grid of sizes
// validates, has the right structure, memory and bubble, and the validator
// rejects hand-broken schedules with a message naming the stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "tessera/core/error.h"
#include "tessera/parallel/pipeline/pipeline_schedule.h"

namespace tessera::parallel {
namespace {

// gtest alone (the unit tests do not link gmock).
#define EXPECT_CONTAINS(text, part)                          \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "expected \"" << (part) << "\" in: " << (text)

PipeInstruction fwd(int mb, int chunk = 0) { return {PipeOp::kForward, mb, chunk, -1}; }
PipeInstruction bwd(int mb, int chunk = 0) { return {PipeOp::kBackward, mb, chunk, -1}; }
PipeInstruction send_act(int mb, int to) { return {PipeOp::kSendActivation, mb, 0, to}; }
PipeInstruction recv_act(int mb, int from) { return {PipeOp::kRecvActivation, mb, 0, from}; }
PipeInstruction send_grad(int mb, int to) { return {PipeOp::kSendGrad, mb, 0, to}; }
PipeInstruction recv_grad(int mb, int from) { return {PipeOp::kRecvGrad, mb, 0, from}; }

std::vector<PipeInstruction> with_step(std::vector<PipeInstruction> list) {
  list.push_back({PipeOp::kReduceGrads, -1, -1, -1});
  list.push_back({PipeOp::kOptimizerStep, -1, -1, -1});
  return list;
}

// The message of the ConfigError `fn` throws; fails the test if it throws none.
std::string config_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

// The message of the tessera::Error validate_schedule throws for `s`.
std::string schedule_error(const PipeSchedule& s, int p, int m, int v = 1) {
  try {
    validate_schedule(s, p, m, v);
  } catch (const ConfigError& e) {
    ADD_FAILURE() << "a broken schedule is not a config error: " << e.what();
    return "";
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected validate_schedule to reject the schedule";
  return "";
}

size_t find(const std::vector<PipeInstruction>& list, const PipeInstruction& ins) {
  return std::find(list.begin(), list.end(), ins) - list.begin();
}

std::vector<PipeInstruction> computations(const std::vector<PipeInstruction>& list) {
  std::vector<PipeInstruction> out;
  for (const auto& ins : list)
    if (ins.op == PipeOp::kForward || ins.op == PipeOp::kBackward) out.push_back(ins);
  return out;
}

// The contract checked independently of validate_schedule: each (micro-batch,
// chunk) forwarded once and backwarded once after it, with its recv before and
// its send after, the step at the end, and no messages with a single stage.
void expect_structure(const PipeSchedule& s, int p, int m, int v) {
  ASSERT_EQ(static_cast<int>(s.size()), p);
  for (int st = 0; st < p; ++st) {
    const auto& list = s[st];
    ASSERT_GE(list.size(), 2u);
    EXPECT_EQ(list[list.size() - 2].op, PipeOp::kReduceGrads);
    EXPECT_EQ(list.back().op, PipeOp::kOptimizerStep);
    for (int i = 0; i < m; ++i)
      for (int c = 0; c < v; ++c) {
        const int k = c * p + st;
        EXPECT_EQ(std::count(list.begin(), list.end(), fwd(i, c)), 1) << "stage " << st;
        EXPECT_EQ(std::count(list.begin(), list.end(), bwd(i, c)), 1) << "stage " << st;
        const size_t f = find(list, fwd(i, c)), b = find(list, bwd(i, c));
        EXPECT_LT(f, b) << "stage " << st << " mb " << i << " chunk " << c;
        if (p == 1) continue;
        const int prev = (k - 1 + p) % p, next = (k + 1) % p;
        if (k > 0) {
          EXPECT_LT(find(list, {PipeOp::kRecvActivation, i, c, prev}), f);
        }
        if (k + 1 < p * v) {
          EXPECT_GT(find(list, {PipeOp::kSendActivation, i, c, next}), f);
          EXPECT_LT(find(list, {PipeOp::kRecvGrad, i, c, next}), b);
        }
        if (k > 0) {
          const size_t sent = find(list, {PipeOp::kSendGrad, i, c, prev});
          EXPECT_GT(sent, b);
          EXPECT_LT(sent, list.size());
        }
      }
    if (p == 1) {
      EXPECT_EQ(computations(list).size() + 2, list.size()) << "p = 1 needs no messages";
    }
  }
}

TEST(PipelineSchedule, InstructionToStringAndEquality) {
  EXPECT_EQ(to_string(fwd(3)), "forward mb 3 chunk 0");
  EXPECT_EQ(to_string(send_act(3, 2)), "send_activation mb 3 chunk 0 to stage 2");
  EXPECT_EQ(to_string(recv_grad(1, 0)), "recv_grad mb 1 chunk 0 from stage 0");
  EXPECT_EQ(to_string(PipeInstruction{PipeOp::kReduceGrads, -1, -1, -1}), "reduce_grads");
  EXPECT_EQ(to_string(PipeOp::kOptimizerStep), "optimizer_step");
  EXPECT_EQ(fwd(1, 2), fwd(1, 2));
  EXPECT_NE(fwd(1, 2), fwd(1, 1));
  EXPECT_NE(send_act(1, 2), send_act(1, 0));
}

TEST(PipelineSchedule, GpipeAnd1F1BValidateWithExactBubble) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      SCOPED_TRACE(::testing::Message() << "p " << p << " m " << m);
      const PipeSchedule g = gpipe_schedule(p, m), f = one_f_one_b_schedule(p, m);
      expect_structure(g, p, m, 1);
      expect_structure(f, p, m, 1);
      const ScheduleStats gs = schedule_stats(g, p, m, 1);  // validates first
      const ScheduleStats fs = schedule_stats(f, p, m, 1);
      EXPECT_EQ(gs.max_live_activations, m);
      EXPECT_LE(fs.max_live_activations, p);
      EXPECT_EQ(fs.max_live_activations, std::min(p, m));
      EXPECT_NEAR(gs.bubble_fraction, static_cast<double>(p - 1) / (m + p - 1), 1e-9);
      EXPECT_NEAR(fs.bubble_fraction, static_cast<double>(p - 1) / (m + p - 1), 1e-9);
      EXPECT_NEAR(bubble_formula(p, m), static_cast<double>(p - 1) / (m + p - 1), 1e-12);
    }
}

TEST(PipelineSchedule, InterleavedValidatesAndBeats1F1B) {
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 16; m += p)
      for (int v = 2; v <= 4; ++v) {
        SCOPED_TRACE(::testing::Message() << "p " << p << " m " << m << " v " << v);
        const PipeSchedule s = interleaved_schedule(p, m, v);
        expect_structure(s, p, m, v);
        const ScheduleStats st = schedule_stats(s, p, m, v);
        EXPECT_EQ(st.max_live_activations, std::min(p * v, m * v));
        EXPECT_NEAR(st.bubble_fraction, bubble_formula(p, m, v), 1e-9);
        if (p >= 2) {
          EXPECT_LT(st.bubble_fraction,
                    schedule_stats(one_f_one_b_schedule(p, m), p, m, 1).bubble_fraction);
        }
      }
}

TEST(PipelineSchedule, OneFOneBOrder) {
  const PipeSchedule s = one_f_one_b_schedule(2, 3);
  EXPECT_EQ(computations(s[0]),
            (std::vector<PipeInstruction>{fwd(0), fwd(1), bwd(0), fwd(2), bwd(1), bwd(2)}));
  EXPECT_EQ(computations(s[1]),
            (std::vector<PipeInstruction>{fwd(0), bwd(0), fwd(1), bwd(1), fwd(2), bwd(2)}));
  // Warm-up: min(p - s - 1, m) forwards before the steady state's first pair.
  const PipeSchedule w = one_f_one_b_schedule(4, 8);
  for (int st = 0; st < 4; ++st) {
    const auto c = computations(w[st]);
    const auto first_bwd = std::find_if(
        c.begin(), c.end(), [](const PipeInstruction& i) { return i.op == PipeOp::kBackward; });
    EXPECT_EQ(first_bwd - c.begin(), 4 - st) << "stage " << st;
  }
  // Neighbours exchange in one order: stage 0 gets gradient 0 before it sends
  // activation 2, and stage 1 sends gradient 0 before it receives activation 2.
  EXPECT_LT(find(s[0], recv_grad(0, 1)), find(s[0], send_act(2, 1)));
  EXPECT_LT(find(s[1], send_grad(0, 0)), find(s[1], recv_act(2, 0)));
}

TEST(PipelineSchedule, InterleavedOrder) {
  // p = 2, v = 2: stage 0 holds virtual stages 0 and 2, stage 1 holds 1 and 3.
  const PipeSchedule s = interleaved_schedule(2, 2, 2);
  EXPECT_EQ(computations(s[0]),
            (std::vector<PipeInstruction>{fwd(0, 0), fwd(1, 0), fwd(0, 1), fwd(1, 1), bwd(0, 1),
                                          bwd(1, 1), bwd(0, 0), bwd(1, 0)}));
  // Virtual stage 1 (stage 1, chunk 0) feeds virtual stage 2 (stage 0, chunk 1).
  EXPECT_LT(find(s[1], {PipeOp::kSendActivation, 0, 0, 0}), s[1].size());
  EXPECT_LT(find(s[0], {PipeOp::kRecvActivation, 0, 1, 1}), find(s[0], fwd(0, 1)));
  EXPECT_LT(find(s[0], {PipeOp::kSendGrad, 0, 1, 1}), s[0].size());
  // One stage: chunks hand over locally, no messages.
  const PipeSchedule one = interleaved_schedule(1, 3, 2);
  EXPECT_EQ(computations(one[0]).size() + 2, one[0].size());
}

TEST(PipelineSchedule, MakeByName) {
  EXPECT_EQ(make_pipeline_schedule("gpipe", 3, 5, 1), gpipe_schedule(3, 5));
  EXPECT_EQ(make_pipeline_schedule("1f1b", 3, 5, 1), one_f_one_b_schedule(3, 5));
  EXPECT_EQ(make_pipeline_schedule("interleaved", 3, 6, 2), interleaved_schedule(3, 6, 2));
  // v = 1 is no interleaving, so no m % p requirement either.
  EXPECT_EQ(make_pipeline_schedule("interleaved", 3, 5, 1), one_f_one_b_schedule(3, 5));
}

TEST(PipelineSchedule, BadArgumentsNameTheKey) {
  EXPECT_CONTAINS(config_error([] { one_f_one_b_schedule(0, 4); }),
                  "pipeline_model_parallel_size must be >= 1, got 0");
  EXPECT_CONTAINS(config_error([] { gpipe_schedule(2, 0); }), "gradient_accumulation_steps");
  EXPECT_CONTAINS(config_error([] { interleaved_schedule(2, 4, 0); }),
                  "virtual_pipeline_model_parallel_size must be >= 1, got 0");
  const std::string divisible = config_error([] { interleaved_schedule(4, 6, 2); });
  EXPECT_CONTAINS(divisible, "gradient_accumulation_steps (6)");
  EXPECT_CONTAINS(divisible, "pipeline_model_parallel_size (4)");
  EXPECT_CONTAINS(config_error([] { make_pipeline_schedule("zero_bubble", 2, 4, 1); }),
                  "valid: gpipe, 1f1b, interleaved");
  EXPECT_CONTAINS(config_error([] { make_pipeline_schedule("1f1b", 2, 4, 2); }),
                  "virtual_pipeline_model_parallel_size 2");
  EXPECT_CONTAINS(config_error([] { make_pipeline_schedule("gpipe", -1, 4, 1); }),
                  "pipeline_model_parallel_size");
  EXPECT_CONTAINS(config_error([] { validate_schedule({}, 0, 1, 1); }),
                  "pipeline_model_parallel_size");
  EXPECT_CONTAINS(config_error([] { bubble_formula(2, 0); }), "gradient_accumulation_steps");
}

TEST(PipelineSchedule, RejectsDroppedRecv) {
  PipeSchedule s = one_f_one_b_schedule(4, 8);
  s[2].erase(s[2].begin() + find(s[2], recv_act(0, 1)));
  const std::string msg = schedule_error(s, 4, 8);
  EXPECT_CONTAINS(msg, "stage 2");
  EXPECT_CONTAINS(msg, "no recv_activation from stage 1");
}

TEST(PipelineSchedule, RejectsSwappedSends) {
  const PipeSchedule s{with_step({fwd(0), fwd(1), send_act(1, 1), send_act(0, 1), recv_grad(0, 1),
                                  bwd(0), recv_grad(1, 1), bwd(1)}),
                       with_step({recv_act(0, 0), fwd(0), bwd(0), send_grad(0, 0), recv_act(1, 0),
                                  fwd(1), bwd(1), send_grad(1, 0)})};
  const std::string msg = schedule_error(s, 2, 2);
  EXPECT_CONTAINS(msg, "stage 0, instruction 2");
  EXPECT_CONTAINS(msg, "stage 1's receive 0");
  EXPECT_CONTAINS(msg, "order their messages alike");
}

TEST(PipelineSchedule, RejectsMissingOrMisplacedComputation) {
  PipeSchedule missing = one_f_one_b_schedule(1, 4);
  missing[0].erase(missing[0].begin() + find(missing[0], bwd(2)));
  EXPECT_CONTAINS(schedule_error(missing, 1, 4),
                  "stage 0: micro-batch 2 chunk 0 is never backwarded");

  PipeSchedule upstream = one_f_one_b_schedule(3, 4);  // its send_grad loses its backward
  upstream[1].erase(upstream[1].begin() + find(upstream[1], bwd(1)));
  EXPECT_CONTAINS(schedule_error(upstream, 3, 4), "stage 1");

  const PipeSchedule early{with_step({bwd(0), fwd(0)})};
  EXPECT_CONTAINS(schedule_error(early, 1, 1), "before its forward");

  const PipeSchedule twice{with_step({fwd(0), fwd(0), bwd(0)})};
  EXPECT_CONTAINS(schedule_error(twice, 1, 1), "stage 0, instruction 1");

  PipeSchedule wrong_peer = gpipe_schedule(3, 2);
  wrong_peer[0][find(wrong_peer[0], send_act(0, 1))].peer_stage = 2;
  EXPECT_CONTAINS(schedule_error(wrong_peer, 3, 2), "lives on stage 1");

  PipeSchedule no_step = gpipe_schedule(2, 2);
  no_step[1].pop_back();
  EXPECT_CONTAINS(schedule_error(no_step, 2, 2), "stage 1 must end with");

  EXPECT_CONTAINS(schedule_error(gpipe_schedule(2, 2), 3, 2), "2 stage lists");

  PipeSchedule chunk = interleaved_schedule(2, 2, 2);  // a recv for the wrong chunk
  chunk[1][find(chunk[1], {PipeOp::kRecvActivation, 0, 0, 0})].chunk = 1;
  EXPECT_CONTAINS(schedule_error(chunk, 2, 2, 2), "stage 1");
}

TEST(PipelineSchedule, RejectsDeadlockingOrder) {
  // Naive 1F1B with blocking sends: stage 0 sends activation 1 while stage 1
  // sends gradient 0; each pair's messages match in order, yet both wait.
  const PipeSchedule s{with_step({fwd(0), send_act(0, 1), fwd(1), send_act(1, 1), recv_grad(0, 1),
                                  bwd(0), recv_grad(1, 1), bwd(1)}),
                       with_step({recv_act(0, 0), fwd(0), bwd(0), send_grad(0, 0), recv_act(1, 0),
                                  fwd(1), bwd(1), send_grad(1, 0)})};
  const std::string msg = schedule_error(s, 2, 2);
  EXPECT_CONTAINS(msg, "deadlocks");
  EXPECT_CONTAINS(msg, "stage 0 waits at instruction 3 (send_activation mb 1");
  EXPECT_CONTAINS(msg, "stage 1 waits at instruction 3 (send_grad mb 0");
  EXPECT_THROW(schedule_stats(s, 2, 2, 1), Error);
}

TEST(PipelineSchedule, BubbleFormula) {
  EXPECT_DOUBLE_EQ(bubble_formula(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(bubble_formula(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_formula(4, 8, 2), 3.0 / 19.0);
}

}  // namespace
}  // namespace tessera::parallel
