// The 8x8 digits from Debian's python3-sklearn: read through zlib, split
// without randomness, malformed files refused with the line and column.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <zlib.h>

#include <string>

#include "tessera/core/error.h"
#include "tessera/data/digits_dataset.h"
#include "testing/files.h"

namespace tessera::data {
namespace {

TEST(DigitsDataset, ReadsTheDebianFileAndSplitsItFourToOne) {
  const auto all = DigitsDataset::load();
  ASSERT_EQ(all.size(), 1797);
  EXPECT_EQ(all.images().sizes(), (std::vector<int64_t>{1797, 1, 8, 8}));
  EXPECT_GE(all.images().min().item<float>(), 0.0f);
  EXPECT_LE(all.images().max().item<float>(), 1.0f);
  // The first image of the file is a zero; every class is there.
  EXPECT_EQ(all.labels()[0].item<int64_t>(), 0);
  EXPECT_EQ(at::bincount(all.labels()).numel(), 10);
  const auto train = all.split(DigitsDataset::Split::kTrain);
  const auto test = all.split(DigitsDataset::Split::kTest);
  EXPECT_EQ(train.size(), 1437);
  EXPECT_EQ(test.size(), 360);
  EXPECT_TRUE(at::equal(test.images()[1], all.images()[5]));  // every fifth image
  EXPECT_GE(at::bincount(test.labels()).min().item<int64_t>(), 20) << "a class is (almost) missing from test";
}

void write_gz(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
}

std::string error_of(const std::string& path) {
  try {
    DigitsDataset::load(path);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(DigitsDataset, MalformedOrMissingFilesAreClearErrors) {
  tessera::testing::TempDir dir("digits");
  std::string row;
  for (int i = 0; i < 64; ++i) row += "3,";
  write_gz(dir.path() + "/ok.csv.gz", row + "7\n" + row + "2\n");
  EXPECT_EQ(DigitsDataset::load(dir.path() + "/ok.csv.gz").size(), 2);
  write_gz(dir.path() + "/pixel.csv.gz", row + "7\n" + "3,99," + row.substr(4) + "1\n");
  const std::string pixel = error_of(dir.path() + "/pixel.csv.gz");
  EXPECT_NE(pixel.find("line 2, column 2"), std::string::npos) << pixel;
  write_gz(dir.path() + "/short.csv.gz", "1,2,3\n");
  EXPECT_NE(error_of(dir.path() + "/short.csv.gz").find("line 1"), std::string::npos);
  const std::string missing = error_of(dir.path() + "/none.csv.gz");
  EXPECT_NE(missing.find("python3-sklearn"), std::string::npos) << missing;
}

}  // namespace
}  // namespace tessera::data
