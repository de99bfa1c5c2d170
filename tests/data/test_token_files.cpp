// Token files (llm.c .bin): write/mmap round trip, validation errors naming the
// file, byte-text datasets, and `tessera data prepare` end to end.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/data/byte_text_dataset.h"
#include "tessera/data/text_to_tokens.h"
#include "tessera/data/token_file_dataset.h"
#include "testing/files.h"
#include "testing/subprocess.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;

class TokenFiles : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.path() + "/" + name; }
  void write(const std::string& name, const std::string& text) const {
    fs::create_directories(fs::path(path(name)).parent_path());
    std::ofstream(path(name), std::ios::binary) << text;
  }
  // Expects a ConfigError whose message names the file and contains `what`.
  template <typename F>
  void expect_error(F&& f, const std::string& file, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no error for " << what;
    } catch (const ConfigError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(file), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  }
  testing::TempDir dir_{"data"};
};

TEST_F(TokenFiles, RoundTripThroughMmap) {
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 1000; ++i) tokens.push_back(static_cast<uint16_t>((i * 7919) % 65536));
  write_token_file(path("t.bin"), tokens);
  EXPECT_EQ(fs::file_size(path("t.bin")), 1024u + 2000u);
  TokenFileDataset ds(path("t.bin"));
  ASSERT_EQ(ds.num_tokens(), 1000);
  EXPECT_EQ(ds.bytes_per_token(), 2);
  EXPECT_EQ(ds.vocab_size(), 65536);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(ds.token(i), tokens[static_cast<size_t>(i)]);
  auto [x, y] = ds.get(10, 8);
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(x[t].item<int64_t>(), tokens[static_cast<size_t>(10 + t)]);
    EXPECT_EQ(y[t].item<int64_t>(), tokens[static_cast<size_t>(11 + t)]);
  }
  EXPECT_EQ(ds.num_windows(8), 992);
  EXPECT_EQ(ds.num_blocks(8), 124);  // (1000 - 1) / 8
  auto [bx, by] = ds.get_blocks({0, 123}, 8);
  EXPECT_EQ(bx.sizes(), (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(bx[1][0].item<int64_t>(), tokens[123 * 8]);
  EXPECT_EQ(by[1][7].item<int64_t>(), tokens[123 * 8 + 8]);
  EXPECT_THROW(ds.get(992, 8), Error);
  EXPECT_THROW(ds.get_blocks({124}, 8), Error);
}

// llm.c's Llama 3 layout: magic 20240801, version 7, uint32 tokens.
TEST_F(TokenFiles, Uint32RoundTripThroughMmap) {
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 500; ++i) tokens.push_back(i * 2654435761u);  // spans all 32 bits
  write_token_file(path("w.bin"), tokens);
  EXPECT_EQ(fs::file_size(path("w.bin")), 1024u + 2000u);
  TokenFileDataset ds(path("w.bin"));
  ASSERT_EQ(ds.num_tokens(), 500);
  EXPECT_EQ(ds.bytes_per_token(), 4);
  EXPECT_EQ(ds.vocab_size(), int64_t{1} << 32);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(ds.token(i), tokens[static_cast<size_t>(i)]);
  auto [x, y] = ds.get(3, 4);
  EXPECT_EQ(y[3].item<int64_t>(), static_cast<int64_t>(tokens[7]));
  // A uint32 header with the uint16 version, and a count the bytes do not hold.
  auto corrupt = [&](const std::string& name, int64_t offset, int32_t value) {
    fs::copy_file(path("w.bin"), path(name));
    std::fstream f(path(name), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(offset);
    f.write(reinterpret_cast<const char*>(&value), 4);
  };
  corrupt("w_version.bin", 4, kTokenFileVersion);
  expect_error([&] { TokenFileDataset d(path("w_version.bin")); }, "w_version.bin", "version 7");
  corrupt("w_count.bin", 8, 1000);
  expect_error([&] { TokenFileDataset d(path("w_count.bin")); }, "w_count.bin", "truncated");
}

TEST_F(TokenFiles, MalformedFilesAreConfigErrorsNamingTheFile) {
  std::vector<uint16_t> tokens(100, 5);
  write_token_file(path("good.bin"), tokens);
  auto corrupt = [&](const std::string& name, int64_t offset, int32_t value) {
    fs::copy_file(path("good.bin"), path(name));
    std::fstream f(path(name), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(offset);
    f.write(reinterpret_cast<const char*>(&value), 4);
  };
  corrupt("magic.bin", 0, 12345);
  expect_error([&] { TokenFileDataset d(path("magic.bin")); }, "magic.bin", "magic");
  corrupt("version.bin", 4, 2);
  expect_error([&] { TokenFileDataset d(path("version.bin")); }, "version.bin", "version");
  corrupt("count.bin", 8, 50);
  expect_error([&] { TokenFileDataset d(path("count.bin")); }, "count.bin", "after its 50 tokens");
  fs::copy_file(path("good.bin"), path("short.bin"));
  fs::resize_file(path("short.bin"), 1024 + 199);
  expect_error([&] { TokenFileDataset d(path("short.bin")); }, "short.bin", "truncated");
  write("tiny.bin", "hello");
  expect_error([&] { TokenFileDataset d(path("tiny.bin")); }, "tiny.bin", "truncated");
  expect_error([&] { TokenFileDataset d(path("absent.bin")); }, "absent.bin", "cannot open");
}

TEST_F(TokenFiles, ByteTextReadsSortedFilesAndSplits) {
  write("corpus/b.txt", "BBBB");
  write("corpus/a.txt", "AAAA");
  write("corpus/sub/c.txt", "CC");
  fs::create_symlink(path("corpus/a.txt"), path("corpus/z_alias.txt"));
  auto files = list_text_files(path("corpus"));
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(fs::path(files[2]).filename(), "c.txt");
  ByteTextOptions o;
  o.val_fraction = 0.2;
  ByteTextDataset train(path("corpus"), o);
  o.split = Split::kVal;
  ByteTextDataset val(path("corpus"), o);
  std::string all(train.bytes().begin(), train.bytes().end());
  all.append(val.bytes().begin(), val.bytes().end());
  EXPECT_EQ(all, "AAAABBBBCC");
  EXPECT_EQ(train.num_tokens(), 8);
  EXPECT_EQ(train.vocab_size(), 256);
  auto [x, y] = train.get(0, 4);
  EXPECT_EQ(bytes_to_string(x), "AAAA");
  EXPECT_EQ(bytes_to_string(y), "AAAB");
  expect_error([&] { ByteTextDataset d(path("nope")); }, "nope", "does not exist");
  o.val_fraction = 1.5;
  EXPECT_THROW(ByteTextDataset(path("corpus"), o), ConfigError);
}

TEST_F(TokenFiles, PrepareWritesTrainAndValTokenFiles) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "line " + std::to_string(i) + " of the corpus\n";
  write("in/doc.txt", text);
  PrepareOptions o;
  o.input = path("in");
  o.output = path("train.bin");
  o.val_fraction = 0.25;
  o.val_output = path("val.bin");
  auto r = prepare_token_files(o);
  EXPECT_EQ(r.train_tokens + r.val_tokens, static_cast<int64_t>(text.size()));
  TokenFileDataset train(o.output), val(o.val_output);
  std::string back;
  for (int64_t i = 0; i < train.num_tokens(); ++i)
    back.push_back(static_cast<char>(train.token(i)));
  for (int64_t i = 0; i < val.num_tokens(); ++i) back.push_back(static_cast<char>(val.token(i)));
  EXPECT_EQ(back, text);
  for (const auto& e : fs::directory_iterator(dir_.path())) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temp file left behind";
  }
  o.val_output.clear();
  EXPECT_THROW(prepare_token_files(o), ConfigError);
}

TEST_F(TokenFiles, CliPrepareEndToEnd) {
  write("in/a.txt", std::string(3000, 'x'));
  const std::string bin = testing::tessera_bin();
  auto ok =
      testing::run_command(bin + " data prepare --input " + path("in") + " --output " +
                               path("t.bin") + " --val-fraction 0.1 --val-output " + path("v.bin"),
                           60);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("wrote 2700 tokens"), std::string::npos) << ok.output;
  EXPECT_EQ(TokenFileDataset(path("v.bin")).num_tokens(), 300);
  auto bad = testing::run_command(
      bin + " data prepare --input " + path("missing") + " --output " + path("x.bin"), 60);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("missing"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(path("x.bin")));
}

}  // namespace
}  // namespace tessera::data
