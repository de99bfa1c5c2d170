#include <gtest/gtest.h>

#include <cstdlib>

#include "tessera/core/env.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

TEST(Env, DefaultsAndParsing) {
  unsetenv("TESSERA_TIMEOUT");
  EXPECT_EQ(env::timeout_seconds(), 300);
  setenv("TESSERA_TIMEOUT", "2.5", 1);
  EXPECT_EQ(env::timeout_seconds(), 2.5);
  setenv("TESSERA_TIMEOUT", "abc", 1);
  try {
    env::timeout_seconds();
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("TESSERA_TIMEOUT='abc'"), std::string::npos);
  }
  unsetenv("TESSERA_TIMEOUT");
}

TEST(Env, UnregisteredVariableIsAnInternalError) {
  EXPECT_THROW(env::get("NOT_A_TESSERA_VARIABLE"), Error);
}

TEST(Env, RegistryHasNoDuplicates) {
  std::set<std::string> names;
  for (const auto& v : env::registry()) EXPECT_TRUE(names.insert(v.name).second) << v.name;
}

}  // namespace
}  // namespace tessera
