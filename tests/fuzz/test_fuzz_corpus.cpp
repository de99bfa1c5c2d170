// Replays the fuzzers' regression corpus, tests/fuzz/corpus/<target>/, through the
// same target functions the libFuzzer binaries run (fuzz_targets.h), on every
// `make test`, without clang or sanitizers: every file must be handled (accepted,
// or rejected with the parser's own error), and every seed-* file, a valid input
// written by the project's own writers, must be accepted, so seeds that rot when a
// format changes are noticed. crash-* files are inputs that once crashed a
// parser (docs/fuzzing.md says which). Memory errors and undefined behaviour need
// the sanitizers: tests/fuzz/run_fuzzers.sh (the `slow` test fuzz_run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "fuzz_targets.h"

namespace tessera::fuzz {

// gtest names a failing parameter by this rather than by its bytes.
void PrintTo(const Target& target, std::ostream* os) { *os << target.name; }

namespace {

namespace fs = std::filesystem;

fs::path corpus_dir(const std::string& target) {
  const char* root = std::getenv("TESSERA_SOURCE_DIR");  // set by tessera_test()
  return fs::path(root != nullptr ? root : ".") / "tests" / "fuzz" / "corpus" / target;
}

std::string read_all(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class FuzzCorpus : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzCorpus, EveryFileIsHandledAndEverySeedAccepted) {
  const Target& target = GetParam();
  const fs::path dir = corpus_dir(target.name);
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing (set TESSERA_SOURCE_DIR to the "
                                     << "source tree when running this binary by hand)";
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << dir << " has no inputs";
  int seeds = 0;
  for (const auto& file : files) {
    const std::string bytes = read_all(file);
    const std::string name = file.filename().string();
    int accepted = -1;
    try {
      accepted = target.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "fuzz_" << target.name << " on " << file << ": " << e.what();
      continue;
    }
    if (name.rfind("seed-", 0) == 0) {
      ++seeds;
      EXPECT_EQ(accepted, 1) << file << " is a seed (a valid input) but the parser rejects it";
    }
  }
  EXPECT_GT(seeds, 0) << dir << " needs at least one seed-* input";
  std::printf("fuzz_%s: %zu corpus files replayed (%d seeds)\n", target.name, files.size(), seeds);
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus, ::testing::ValuesIn(kTargets),
                         [](const ::testing::TestParamInfo<Target>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace tessera::fuzz
