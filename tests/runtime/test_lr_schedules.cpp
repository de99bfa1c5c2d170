// LR schedules against DeepSpeed's lr_schedules.py, formula and timing, step for
// step. The reference below restates DeepSpeed's classes as DeepSpeed's engine uses
// them: built at last_batch_iteration -1 (which sets the lr of the first optimizer
// step), stepped once after every optimizer step. The engine's side is measured,
// not read back: a one-element parameter with gradient 1 under plain SGD moves by
// exactly -lr at each step.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/runtime/engine.h"
#include "tessera/runtime/lr_schedules.h"
#include "testing/thread_ranks.h"

namespace tessera::runtime {
namespace {

// DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR for one parameter group.
class DeepSpeedReference {
 public:
  DeepSpeedReference(const SchedulerConfig& c, double optimizer_lr)
      : c_(c), org_lr_(optimizer_lr), w_(std::max<int64_t>(2, c.warmup_num_steps)) {}
  // Current lr of the group (what the next optimizer step uses).
  double lr() const { return get_lr(it_); }
  void step() { ++it_; }

 private:
  double gamma_warmup(int64_t it) const {
    if (c_.warmup_type == "log") return std::log(it + 1.0) / std::log(static_cast<double>(w_));
    return static_cast<double>(it) / w_;
  }
  double get_lr(int64_t it) const {
    if (c_.type == "WarmupCosineLR") {
      if (it < 0) return 0.0;  // get_lr() returns [0.0] before the start
      double ratio;
      if (it < w_) {
        ratio = c_.warmup_min_ratio + gamma_warmup(it) * (1.0 - c_.warmup_min_ratio);
      } else {
        const double real_last = it - w_ + 1, real_total = c_.total_num_steps - w_;
        ratio = (1 + std::cos(M_PI * real_last / real_total)) / 2;
        ratio = std::max(0.0, c_.cos_min_ratio + (1.0 - c_.cos_min_ratio) * ratio);
      }
      return org_lr_ * ratio;
    }
    if (it < 0) return c_.warmup_min_lr;  // min_lrs before the start
    double gamma = 1.0;
    if (it < w_) {
      gamma = gamma_warmup(it);
    } else if (c_.type == "WarmupDecayLR") {
      gamma = std::max(0.0, static_cast<double>(c_.total_num_steps - it) /
                                std::max(1.0, static_cast<double>(c_.total_num_steps - w_)));
    }
    return c_.warmup_min_lr + (c_.warmup_max_lr - c_.warmup_min_lr) * gamma;
  }

  SchedulerConfig c_;
  double org_lr_;
  int64_t w_;
  int64_t it_ = -1;
};

struct OneWeight : torch::nn::Module {
  OneWeight() { w = register_parameter("w", torch::zeros({1}, torch::kDouble)); }
  torch::Tensor w;
};

// The lr each of `steps` optimizer steps of the engine really applied.
std::vector<double> applied_lrs(const std::string& scheduler_json, int steps) {
  std::vector<double> lrs;
  tessera::testing::run_ranks(1, [&](int rank, int size, auto store) {
    auto group = tessera::testing::make_group(rank, size, store, "gloo", 10);
    auto model = std::make_shared<OneWeight>();
    Engine engine(model, Config::from_string(R"({"train_batch_size": 1, "optimizer":
        {"type": "SGD", "params": {"lr": 0.5}}, "scheduler": )" + scheduler_json + "}"), group);
    for (int k = 0; k < steps; ++k) {
      const double before = model->w.item<double>();
      engine.backward(model->w.sum());  // gradient 1
      engine.step();
      lrs.push_back(before - model->w.item<double>());
    }
  });
  return lrs;
}

void expect_deepspeed_trajectory(const std::string& json, int steps) {
  const auto cfg = Config::from_string(R"({"train_batch_size": 1, "optimizer":
      {"type": "SGD", "params": {"lr": 0.5}}, "scheduler": )" + json + "}");
  DeepSpeedReference ds(cfg.scheduler, 0.5);
  const auto got = applied_lrs(json, steps);
  for (int k = 0; k < steps; ++k) {
    EXPECT_NEAR(got[k], ds.lr(), 1e-12) << json << ": optimizer step " << k + 1;
    ds.step();
  }
}

TEST(LrSchedule, EveryScheduleFollowsDeepSpeedStepForStep) {
  for (const char* type : {"log", "linear"}) {
    const std::string t = type;
    expect_deepspeed_trajectory(R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0.01,
        "warmup_max_lr": 0.2, "warmup_num_steps": 10, "warmup_type": ")" + t + R"("}})", 16);
    expect_deepspeed_trajectory(R"({"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.01,
        "warmup_max_lr": 0.2, "warmup_num_steps": 10, "warmup_type": ")" + t +
        R"(", "total_num_steps": 24}})", 28);
    expect_deepspeed_trajectory(R"({"type": "WarmupCosineLR", "params": {"warmup_min_ratio": 0.1,
        "warmup_num_steps": 10, "cos_min_ratio": 0.05, "warmup_type": ")" + t +
        R"(", "total_num_steps": 24}})", 26);
  }
}

// The points the review found: step 1 runs at warmup_min_lr (cosine: 0), and with a
// 10-step linear warmup no two steps share the peak: the warmup ends at 0.9 of the
// lr (iteration 9) and the cosine starts one iteration into its decay.
TEST(LrSchedule, FirstStepsAndPeakAsInDeepSpeed) {
  const auto lin = applied_lrs(R"({"type": "WarmupCosineLR", "params": {"warmup_num_steps": 10,
      "warmup_type": "linear", "total_num_steps": 30, "cos_min_ratio": 0.0}})", 14);
  EXPECT_EQ(lin[0], 0.0);                 // step 1: iteration -1
  EXPECT_EQ(lin[1], 0.0);                 // step 2: iteration 0, gamma 0
  EXPECT_NEAR(lin[2], 0.5 * 0.1, 1e-12);  // step 3: iteration 1
  EXPECT_NEAR(lin[10], 0.5 * 0.9, 1e-12); // step 11: iteration 9, the last warmup point
  EXPECT_NEAR(lin[11], 0.5 * (1 + std::cos(M_PI / 20)) / 2, 1e-12);  // step 12: iteration 10
  EXPECT_LT(lin[12], lin[11]);
  const auto warm = applied_lrs(R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0.03,
      "warmup_max_lr": 0.3, "warmup_num_steps": 5, "warmup_type": "linear"}})", 8);
  EXPECT_NEAR(warm[0], 0.03, 1e-12);
  EXPECT_NEAR(warm[1], 0.03, 1e-12);
  EXPECT_NEAR(warm[6], 0.3, 1e-12);
}

TEST(LrSchedule, WithoutSchedulerTheGroupLrIsUntouched) {
  LrSchedule s(SchedulerConfig{});
  EXPECT_FALSE(s.active());
  EXPECT_DOUBLE_EQ(s.lr_at(-1, 0.01), 0.01);
  EXPECT_DOUBLE_EQ(s.lr_at(1000, 0.02), 0.02);
}

TEST(LrSchedule, CosineScalesEachGroupAndWarmupLRSetsOneValue) {
  SchedulerConfig cos;
  cos.type = "WarmupCosineLR";
  cos.warmup_num_steps = 4;
  cos.warmup_type = "linear";
  cos.total_num_steps = 20;
  LrSchedule c(cos);
  EXPECT_DOUBLE_EQ(c.lr_at(2, 1.0) * 3.0, c.lr_at(2, 3.0));
  SchedulerConfig warm;
  warm.type = "WarmupLR";
  warm.warmup_max_lr = 0.1;
  LrSchedule w(warm);
  EXPECT_DOUBLE_EQ(w.lr_at(5000, 1.0), w.lr_at(5000, 7.0));
}

}  // namespace
}  // namespace tessera::runtime
