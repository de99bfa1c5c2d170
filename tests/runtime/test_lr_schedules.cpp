// LR schedules against DeepSpeed's formulas at chosen steps.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/runtime/lr_schedules.h"

namespace tessera::runtime {
namespace {

TEST(LrSchedule, ConstantWithoutScheduler) {
  LrSchedule s(SchedulerConfig{}, 0.01);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.01);
  EXPECT_DOUBLE_EQ(s.lr_at(1000), 0.01);
}

TEST(LrSchedule, WarmupLRLinearAndLog) {
  SchedulerConfig c;
  c.type = "WarmupLR";
  c.warmup_min_lr = 0.0;
  c.warmup_max_lr = 1.0;
  c.warmup_num_steps = 10;
  c.warmup_type = "linear";
  LrSchedule lin(c, 1.0);
  EXPECT_DOUBLE_EQ(lin.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(lin.lr_at(5), 0.5);
  EXPECT_DOUBLE_EQ(lin.lr_at(10), 1.0);
  EXPECT_DOUBLE_EQ(lin.lr_at(500), 1.0);
  c.warmup_type = "log";
  LrSchedule lg(c, 1.0);
  EXPECT_NEAR(lg.lr_at(4), std::log(5.0) / std::log(10.0), 1e-12);
}

TEST(LrSchedule, WarmupDecayLRReachesZero) {
  SchedulerConfig c;
  c.type = "WarmupDecayLR";
  c.warmup_max_lr = 0.1;
  c.warmup_num_steps = 10;
  c.warmup_type = "linear";
  c.total_num_steps = 110;
  LrSchedule s(c, 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.1);
  EXPECT_NEAR(s.lr_at(60), 0.05, 1e-12);
  EXPECT_DOUBLE_EQ(s.lr_at(110), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(200), 0.0);
}

TEST(LrSchedule, WarmupCosineLRIsARatioOfTheBaseLr) {
  SchedulerConfig c;
  c.type = "WarmupCosineLR";
  c.warmup_num_steps = 10;
  c.warmup_type = "linear";
  c.warmup_min_ratio = 0.0;
  c.cos_min_ratio = 0.1;
  c.total_num_steps = 110;
  LrSchedule s(c, 2.0);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 2.0);
  EXPECT_NEAR(s.lr_at(60), 2.0 * (0.5 * 0.9 + 0.1), 1e-12);  // halfway: cos = 0
  EXPECT_NEAR(s.lr_at(110), 0.2, 1e-12);
}

}  // namespace
}  // namespace tessera::runtime
