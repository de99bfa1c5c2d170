// LossScaler: DeepSpeed's dynamic loss-scale rules step by step, the static
// scale, the persistent-overflow error, checkpointed state; and the config's
// fp16 / bf16 / communication_data_type keys.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/precision/loss_scaler.h"

namespace tessera::runtime::precision {
namespace {

LossScalerOptions dynamic(int power, int64_t window, int hysteresis) {
  LossScalerOptions o;
  o.initial_scale_power = power;
  o.loss_scale_window = window;
  o.hysteresis = hysteresis;
  return o;
}

TEST(LossScaler, DefaultsAreDeepSpeeds) {
  LossScaler s(LossScalerOptions{});
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 65536.0);
}

TEST(LossScaler, DoublesAfterEachCleanWindow) {
  LossScaler s(dynamic(4, 3, 2));
  // DeepSpeed counts from iteration -1: the first doubling comes on the 3rd clean step.
  EXPECT_FALSE(s.update(false));
  EXPECT_FALSE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 32.0);
  s.update(false);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 64.0);
}

TEST(LossScaler, HysteresisAbsorbsOverflowsBeforeHalving) {
  LossScaler s(dynamic(10, 1000, 2));
  EXPECT_FALSE(s.update(true));  // absorbed
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512.0);
  // Without consecutive_hysteresis the budget is not refilled by clean steps...
  s.update(false);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 256.0);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsAfterACleanStep) {
  LossScalerOptions o = dynamic(10, 1000, 2);
  o.consecutive_hysteresis = true;
  LossScaler s(o);
  s.update(true);   // absorbed
  s.update(false);  // refills
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 1024.0);
}

TEST(LossScaler, WindowCountsFromTheLastOverflow) {
  LossScaler s(dynamic(4, 2, 1));
  s.update(true);  // 16 -> 8 at iteration 0
  s.update(false);  // iteration 1: 1 step since the overflow
  EXPECT_EQ(s.scale(), 8.0);
  s.update(false);  // iteration 2: 2 steps since
  EXPECT_EQ(s.scale(), 16.0);
}

TEST(LossScaler, NeverBelowTheMinimumAndStopsWhenOverflowPersistsThere) {
  LossScalerOptions o = dynamic(2, 3, 1);
  o.min_loss_scale = 1;
  LossScaler s(o);
  s.update(true);  // 4 -> 2
  s.update(true);  // 2 -> 1
  EXPECT_EQ(s.scale(), 1.0);
  s.update(true);  // at the floor: 1 of 3
  s.update(true);  // 2 of 3
  EXPECT_EQ(s.scale(), 1.0);
  try {
    s.update(true);
    FAIL() << "no error after 3 overflowing steps at the minimum";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overflowed (inf or nan) on 3 consecutive steps"),
              std::string::npos) << e.what();
  }
}

TEST(LossScaler, StaticScaleNeverMovesButStillStopsOnPersistentOverflow) {
  LossScalerOptions o;
  o.loss_scale = 128;
  o.loss_scale_window = 2;
  LossScaler s(o);
  EXPECT_FALSE(s.dynamic());
  for (int i = 0; i < 5; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 128.0);
  s.update(true);
  s.update(false);  // a clean step resets the count
  s.update(true);
  EXPECT_EQ(s.scale(), 128.0);
  EXPECT_THROW(s.update(true), Error);
}

TEST(LossScaler, StateRoundTrips) {
  LossScaler a(dynamic(8, 4, 2));
  a.update(true);
  a.update(true);
  a.update(false);
  LossScaler b(dynamic(8, 4, 2));
  b.load_state(a.state());
  EXPECT_EQ(b.scale(), a.scale());
  for (bool overflow : {false, false, true, true, false, false, false, false}) {
    a.update(overflow);
    b.update(overflow);
    EXPECT_EQ(a.scale(), b.scale());
  }
}

TEST(LossScaler, BadOptionsAreConfigErrors) {
  LossScalerOptions o;
  o.hysteresis = 0;
  EXPECT_THROW(LossScaler{o}, ConfigError);
  o = LossScalerOptions{};
  o.min_loss_scale = 0;
  EXPECT_THROW(LossScaler{o}, ConfigError);
}

TEST(PrecisionConfig, ParsesDeepSpeedKeysAndRefusesContradictions) {
  Config c = Config::from_string(R"({"train_batch_size": 2, "fp16": {"enabled": true,
      "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 500, "hysteresis": 3,
      "consecutive_hysteresis": true, "min_loss_scale": 0.5}})");
  EXPECT_EQ(c.precision.dtype, "fp16");
  EXPECT_EQ(c.precision.initial_scale_power, 12);
  EXPECT_EQ(c.precision.loss_scale_window, 500);
  EXPECT_EQ(c.precision.hysteresis, 3);
  EXPECT_TRUE(c.precision.consecutive_hysteresis);
  EXPECT_EQ(c.precision.min_loss_scale, 0.5);
  EXPECT_EQ(Config::from_string(R"({"bf16": {"enabled": true}})").precision.dtype, "bf16");
  EXPECT_EQ(Config::from_string(R"({"bf16": {"enabled": false}})").precision.dtype, "fp32");
  EXPECT_EQ(Config::from_string(R"({"communication_data_type": "bf16"})")
                .precision.communication_data_type, "bf16");
  try {
    Config::from_string(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("both 'fp16' and 'bf16'"), std::string::npos);
  }
  EXPECT_THROW(Config::from_string(R"({"communication_data_type": "int8"})"), ConfigError);
  EXPECT_THROW(Config::from_string(R"({"fp16": {"enabled": true, "loss_scael": 1}})"), ConfigError);
  EXPECT_THROW(Config::from_string(R"({"fp16": {"enabled": true, "auto_cast": true}})"), ConfigError);
}

}  // namespace
}  // namespace tessera::runtime::precision
