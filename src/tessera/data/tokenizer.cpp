#include "tessera/data/tokenizer.h"

#include <filesystem>

#include "tessera/core/check.h"
#include "tessera/data/bpe_tokenizer.h"
#include "tessera/data/hf_tokenizer_files.h"
#include "tessera/data/sentencepiece_tokenizer.h"

namespace tessera::data {

namespace {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> from_vocab_and_merges(const fs::path& vocab, const fs::path& merges) {
  TS_CHECK_T(ConfigError, fs::is_regular_file(vocab) && fs::is_regular_file(merges),
             "a GPT-2 style tokenizer needs both vocab.json and merges.txt; ",
             fs::is_regular_file(vocab) ? merges.string() : vocab.string(), " is missing");
  return std::make_unique<BpeTokenizer>(read_vocab_and_merges(vocab.string(), merges.string()));
}

// The single *.model file of `dir`, or "" when there is none or more than one.
fs::path only_model_file(const fs::path& dir) {
  fs::path found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".model") {
      if (!found.empty()) return {};
      found = entry.path();
    }
  }
  return found;
}

std::unique_ptr<Tokenizer> from_directory(const fs::path& dir) {
  if (fs::is_regular_file(dir / "tokenizer.json")) {
    return std::make_unique<BpeTokenizer>(read_tokenizer_json((dir / "tokenizer.json").string()));
  }
  if (fs::is_regular_file(dir / "vocab.json") || fs::is_regular_file(dir / "merges.txt")) {
    return from_vocab_and_merges(dir / "vocab.json", dir / "merges.txt");
  }
  fs::path model = dir / "tokenizer.model";
  if (!fs::is_regular_file(model)) model = only_model_file(dir);
  TS_CHECK_T(ConfigError, !model.empty(), "no tokenizer in directory ", dir.string(),
             ": looked for tokenizer.json, vocab.json + merges.txt, tokenizer.model or a "
             "single *.model file");
  return std::make_unique<SentencePieceTokenizer>(model.string());
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  const fs::path p(path);
  TS_CHECK_T(ConfigError, !path.empty() && fs::exists(p), "tokenizer path '", path,
             "' does not exist (give a tokenizer.json, vocab.json, a SentencePiece .model or "
             "a directory holding one)");
  if (fs::is_directory(p)) return from_directory(p);
  const std::string name = p.filename().string();
  if (name == "vocab.json") return from_vocab_and_merges(p, p.parent_path() / "merges.txt");
  if (name == "merges.txt") return from_vocab_and_merges(p.parent_path() / "vocab.json", p);
  if (p.extension() == ".json") return std::make_unique<BpeTokenizer>(read_tokenizer_json(path));
  if (p.extension() == ".model") return std::make_unique<SentencePieceTokenizer>(path);
  TS_THROW(ConfigError, "cannot tell the tokenizer kind of ", path,
           ": expected tokenizer.json (or another .json), vocab.json, merges.txt, a "
           "SentencePiece .model, or a directory holding one");
}

}  // namespace tessera::data
