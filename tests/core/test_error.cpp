#include <gtest/gtest.h>

#include "tessera/core/check.h"

namespace tessera {
namespace {

TEST(Error, CarriesRankPrefixAndNoBacktrace) {
  set_rank_context(2, 4);
  try {
    TS_CHECK_T(ConfigError, false, "bad value ", 7);
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "[rank 2/4] bad value 7");
    EXPECT_EQ(e.bare_message(), "bad value 7");
  }
  set_rank_context(-1, -1);
}

TEST(Error, CheckOpPrintsBothValues) {
  try {
    int a = 3, b = 5;
    TS_CHECK_EQ(a, b, "while testing");
    FAIL() << "no throw";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("3 vs 5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("while testing"), std::string::npos) << msg;
  }
}

TEST(Error, TypedErrorsAreC10Errors) {
  EXPECT_THROW(TS_THROW(TimeoutError, "slow"), c10::Error);
  EXPECT_THROW(TS_THROW(TimeoutError, "slow"), CommError);
}

}  // namespace
}  // namespace tessera
