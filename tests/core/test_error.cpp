#include <gtest/gtest.h>

#include "tessera/core/check.h"
#include "tessera/core/logging.h"

#include <cstdlib>
#include <thread>

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

namespace tessera {
namespace {

// Fix from review: with ranks as threads the one process-wide context named the
// same rank in every thread's errors.
TEST(Error, EachThreadRankHasItsOwnContext) {
  set_rank_context(0, 4);  // what a process-wide init would have set
  std::string seen[2];
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([r, &seen] {
      ScopedRankContext context(r + 2, 4);
      try {
        TS_THROW(CommError, "peer gone");
      } catch (const CommError& e) {
        seen[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(seen[0], "[rank 2/4] peer gone");
  EXPECT_EQ(seen[1], "[rank 3/4] peer gone");
  {
    ScopedRankContext outer(1, 4);
    {
      ScopedRankContext inner(3, 4);
      EXPECT_EQ(rank_prefix(), "[rank 3/4] ");
    }
    EXPECT_EQ(rank_prefix(), "[rank 1/4] ");
  }
  EXPECT_EQ(rank_prefix(), "[rank 0/4] ");
  set_rank_context(-1, -1);
}

// Fix from review: an invalid TESSERA_LOG_LEVEL used to fall back to info silently.
TEST(Logging, InvalidLevelIsAConfigError) {
  setenv("TESSERA_LOG_LEVEL", "verbose", 1);
  try {
    log::level_from_env();
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("TESSERA_LOG_LEVEL='verbose' is not a log level: use "
                                         "debug, info, warn or error"),
              std::string::npos) << e.what();
  }
  setenv("TESSERA_LOG_LEVEL", "warn", 1);
  EXPECT_EQ(log::level_from_env(), log::Level::WARN);
  unsetenv("TESSERA_LOG_LEVEL");
  EXPECT_EQ(log::level_from_env(), log::Level::INFO);
}

}  // namespace
}  // namespace tessera
