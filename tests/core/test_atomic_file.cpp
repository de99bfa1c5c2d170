#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>

#include "tessera/core/atomic_file.h"
#include "testing/files.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class AtomicFile : public ::testing::Test {
 protected:
  std::string read(const fs::path& p) { return testing::read_text_file(p.string()); }
  void replace(const fs::path& p, const std::string& text) {
    core::replace_file_atomically<ConfigError>(
        p.string(), "test file", true, [&](const auto& write) { write(text.data(), text.size()); });
  }
  int entries() { return std::distance(fs::directory_iterator(dir_), fs::directory_iterator()); }

  testing::TempDir tmp_{"atomic"};
  fs::path dir_{tmp_.path()};
};

TEST_F(AtomicFile, ReplacesTheWholeFileAndLeavesNoTempBehind) {
  replace(dir_ / "f", "first");
  replace(dir_ / "f", "second, longer");
  EXPECT_EQ(read(dir_ / "f"), "second, longer");
  EXPECT_EQ(entries(), 1);
}

TEST_F(AtomicFile, AFailedWriteKeepsTheOldContents) {
  replace(dir_ / "f", "good");
  EXPECT_THROW(
      core::replace_file_atomically<ConfigError>((dir_ / "f").string(), "test file", true,
                                                 [&](const auto& write) {
                                                   write("partial", 7);
                                                   throw std::runtime_error("disk went away");
                                                 }),
      std::runtime_error);
  EXPECT_EQ(read(dir_ / "f"), "good");
  EXPECT_EQ(entries(), 1) << "the temp file of the failed write was left behind";
}

TEST_F(AtomicFile, AMissingDirectoryIsNamedInTheCallersErrorType) {
  try {
    replace(dir_ / "no_such_dir" / "f", "x");
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("cannot create test file"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no_such_dir"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tessera
