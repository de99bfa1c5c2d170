// Tokenizers against Hugging Face `tokenizers`: tokenizer_reference.py trains a
// GPT-2 style and a Llama-3 style byte-level BPE and a SentencePiece BPE model on
// about 1 MB of multilingual text it generates, and writes HF's ids for that
// text. Tessera loads the same files and must produce the same ids, every one;
// byte-level BPE must also decode back to the exact text. Then the refusals.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/data/text_to_tokens.h"
#include "tessera/data/token_file_dataset.h"
#include "tessera/data/tokenizer.h"
#include "testing/files.h"
#include "testing/subprocess.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;

class Tokenizers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string problem =
        testing::python_import_problem("tokenizers, transformers, sentencepiece");
    ASSERT_TRUE(problem.empty()) << problem;
    dir_ = std::make_unique<testing::TempDir>("tokenizers");
    auto r = testing::run_command(testing::python_bin() + " " +
                                      testing::source_path("tests/data/tokenizer_reference.py") +
                                      " create " + dir_->path() + " 2>&1",
                                  120);
    ASSERT_EQ(r.exit_code, 0) << "tokenizer_reference.py failed:\n" << r.output;
    std::cout << r.output;
    text_ = testing::read_text_file(path("text.txt"));
  }
  static void TearDownTestSuite() { dir_.reset(); }
  void SetUp() override { ASSERT_FALSE(text_.empty()) << "the reference text was not made"; }

  static std::string path(const std::string& name) { return dir_->path() + "/" + name; }

  static std::vector<int64_t> read_ids(const std::string& name) {
    std::ifstream in(path(name), std::ios::binary);
    std::vector<int64_t> ids;
    int32_t id = 0;
    while (in.read(reinterpret_cast<char*>(&id), sizeof(id))) ids.push_back(id);
    return ids;
  }

  // Encodes the text with `tokenizer` and compares every id with HF's `ids_file`;
  // on a difference, names the first position and the text of both tokens there.
  static void expect_hf_ids(const Tokenizer& tokenizer, const std::string& ids_file) {
    const std::vector<int64_t> expected = read_ids(ids_file);
    ASSERT_GT(expected.size(), 100000u) << ids_file;
    const std::vector<int64_t> got = tokenizer.encode(text_);
    size_t first = 0;
    while (first < got.size() && first < expected.size() && got[first] == expected[first]) ++first;
    if (first < got.size() || first < expected.size()) {
      auto piece = [&](const std::vector<int64_t>& ids) {
        return first < ids.size() ? tokenizer.decode({ids[first]}) : std::string("<end>");
      };
      const size_t from = first < 5 ? 0 : first - 5;
      const std::vector<int64_t> before(expected.begin() + from, expected.begin() + first);
      FAIL() << tokenizer.description() << ": " << got.size() << " ids vs HF's " << expected.size()
             << "; first difference at id " << first << " after '" << tokenizer.decode(before)
             << "': Tessera '" << piece(got) << "' (" << (first < got.size() ? got[first] : -1)
             << "), HF '" << piece(expected) << "' ("
             << (first < expected.size() ? expected[first] : -1) << ")";
    }
    std::cout << tokenizer.description() << ": " << got.size() << " ids identical to HF's over "
              << text_.size() << " bytes\n";
  }

  static void write(const std::string& name, const std::string& text) {
    fs::create_directories(fs::path(path(name)).parent_path());
    std::ofstream(path(name), std::ios::binary) << text;
  }

  static std::unique_ptr<testing::TempDir> dir_;
  static std::string text_;
};

std::unique_ptr<testing::TempDir> Tokenizers::dir_;
std::string Tokenizers::text_;

// A ConfigError whose message contains `part` (a file name, the problem).
void expect_config_error(const std::function<void()>& body, const std::string& part) {
  try {
    body();
    ADD_FAILURE() << "no ConfigError; expected one mentioning '" << part << "'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << part << "'";
  }
}

TEST_F(Tokenizers, Gpt2TokenizerJsonMatchesHf) {
  auto tokenizer = load_tokenizer(path("gpt2"));  // a directory: its tokenizer.json
  EXPECT_EQ(tokenizer->vocab_size(), 2001);
  expect_hf_ids(*tokenizer, "gpt2_json.ids");
  EXPECT_TRUE(tokenizer->decode(tokenizer->encode(text_)) == text_) << "decode(encode(x)) != x";
}

TEST_F(Tokenizers, Gpt2VocabAndMergesMatchHf) {
  auto tokenizer = load_tokenizer(path("gpt2/vocab.json"));
  EXPECT_EQ(tokenizer->vocab_size(), 2000);
  expect_hf_ids(*tokenizer, "gpt2_files.ids");
  EXPECT_TRUE(tokenizer->decode(tokenizer->encode(text_)) == text_) << "decode(encode(x)) != x";
}

TEST_F(Tokenizers, Llama3StyleMatchesHf) {
  auto tokenizer = load_tokenizer(path("llama3/tokenizer.json"));
  expect_hf_ids(*tokenizer, "llama3.ids");
  // "<mask>" strips the whitespace around it (lstrip/rstrip), so only text
  // without it decodes back exactly.
  const std::string plain =
      "Größe  Straße\t123456 привет 世界 🚀👍🏽\n\n  x <|eot_id|>y";
  EXPECT_EQ(tokenizer->decode(tokenizer->encode(plain)), plain);
  const std::vector<int64_t> masked = tokenizer->encode("a  <mask>  b");
  EXPECT_EQ(tokenizer->decode(masked), "a<mask>b");
}

TEST_F(Tokenizers, SentencePieceMatchesHf) {
  auto tokenizer = load_tokenizer(path("spm"));  // a directory: its tokenizer.model
  EXPECT_EQ(tokenizer->vocab_size(), 2000);
  expect_hf_ids(*tokenizer, "spm.ids");
}

TEST_F(Tokenizers, PrepareWritesTokenizerIds) {
  PrepareOptions options;
  options.input = path("text.txt");
  options.output = path("train.bin");
  options.val_fraction = 0.1;
  options.val_output = path("val.bin");
  options.tokenizer = path("gpt2");
  const PrepareResult result = prepare_token_files(options);
  const std::vector<int64_t> expected = read_ids("gpt2_json.ids");
  ASSERT_EQ(result.train_tokens + result.val_tokens, static_cast<int64_t>(expected.size()));
  TokenFileDataset train(options.output), val(options.val_output);
  std::vector<int64_t> got(expected.size());
  train.copy_tokens(0, train.num_tokens(), got.data());
  val.copy_tokens(0, val.num_tokens(), got.data() + train.num_tokens());
  EXPECT_TRUE(got == expected) << "token files differ from HF's ids";
}

// A vocabulary past 65536 ids (Llama 3 has 128256) is written as uint32 tokens,
// llm.c's Llama 3 layout, and read back with the same ids, <big> included.
TEST_F(Tokenizers, PrepareWritesUint32TokensBeyondUint16Vocabularies) {
  nlohmann::json json = nlohmann::json::parse(testing::read_text_file(path("gpt2/tokenizer.json")));
  json["added_tokens"].push_back({{"id", 70000}, {"content", "<big>"}, {"special", true}});
  write("big/tokenizer.json", json.dump());
  auto tokenizer = load_tokenizer(path("big"));
  EXPECT_EQ(tokenizer->vocab_size(), 70001);
  write("big.txt", testing::read_text_file(path("text.txt")) + "<big> and <big>");
  PrepareOptions options;
  options.input = path("big.txt");
  options.output = path("big.bin");
  options.tokenizer = path("big");
  const PrepareResult result = prepare_token_files(options);
  EXPECT_EQ(result.bytes_per_token, 4);
  const std::vector<int64_t> expected =
      tokenizer->encode(testing::read_text_file(path("big.txt")));
  ASSERT_EQ(std::count(expected.begin(), expected.end(), 70000), 2);
  TokenFileDataset file(options.output);
  EXPECT_EQ(file.bytes_per_token(), 4);
  EXPECT_EQ(fs::file_size(options.output), 1024u + 4u * expected.size());
  std::vector<int64_t> got(static_cast<size_t>(file.num_tokens()));
  file.copy_tokens(0, file.num_tokens(), got.data());
  EXPECT_TRUE(got == expected) << "uint32 token file differs from the tokenizer's ids";
}

TEST_F(Tokenizers, ClearErrors) {
  expect_config_error([&] { load_tokenizer(path("nowhere")); }, "nowhere");
  write("empty/readme.txt", "no tokenizer here");
  expect_config_error([&] { load_tokenizer(path("empty")); }, "tokenizer.json");
  write("bad/tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");
  expect_config_error([&] { load_tokenizer(path("bad")); }, "not valid JSON");
  write("unigram/tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  expect_config_error([&] { load_tokenizer(path("unigram")); }, "model type 'Unigram'");
  write("metaspace/tokenizer.json",
        R"({"model": {"type": "BPE", "vocab": {}, "merges": []},)"
        R"( "pre_tokenizer": {"type": "Metaspace", "replacement": "_"}})");
  expect_config_error([&] { load_tokenizer(path("metaspace")); }, "Metaspace");
  write("nomerge/tokenizer.json",
        R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "b"]]},)"
        R"( "pre_tokenizer": {"type": "ByteLevel"}})");
  expect_config_error([&] { load_tokenizer(path("nomerge")); }, "'b'");
  write("typo/tokenizer.json", R"({"model": {"type": "BPE", "vocab": [1, 2], "merges": []},)"
                               R"( "pre_tokenizer": {"type": "ByteLevel"}})");
  expect_config_error([&] { load_tokenizer(path("typo")); }, "model.vocab");
  write("wrongtype/tokenizer.json",
        R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []},)"
        R"( "pre_tokenizer": {"type": "ByteLevel"}})");
  expect_config_error([&] { load_tokenizer(path("wrongtype")); }, "malformed");
  write("half/vocab.json", "{}");
  expect_config_error([&] { load_tokenizer(path("half")); }, "merges.txt");
  write("spm/broken.model", "not a model");
  expect_config_error([&] { load_tokenizer(path("spm/broken.model")); }, "broken.model");
  auto tokenizer = load_tokenizer(path("gpt2"));
  expect_config_error([&] { tokenizer->decode({5000}); }, "5000");
  expect_config_error([&] { tokenizer->encode("ok \xff\xfe bytes"); }, "UTF-8");
}

}  // namespace
}  // namespace tessera::data
