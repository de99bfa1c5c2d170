// BpeTokenizer: byte-level BPE (GPT-2, Llama-3, Qwen-style vocabularies), giving
// the ids Hugging Face `tokenizers` gives for the same tokenizer.json.
//
// encode() runs HF's pipeline: added tokens are cut out first (AddedTokenMatcher),
// each remaining stretch goes through the pre-tokenizer steps (regex splits, the
// ByteLevel step with its optional prefix space), and each resulting word is
// merged by BPE: the pair of adjacent symbols with the lowest merge rank first,
// the leftmost on ties, until no pair has a merge (HF's heap order exactly). The
// vocabulary is kept as raw bytes, so the byte-to-unicode mapping of GPT-2 costs
// nothing at encode time. A word's ids are cached (up to kCacheWords words), so
// text in a natural language is mostly lookups.
//
// The spec comes from hf_tokenizer_files.h (tokenizer.json, or vocab.json +
// merges.txt). The constructor throws ConfigError naming spec.source when a merge
// names a token the vocabulary lacks or a vocabulary token is not byte-level.
//
// Threads: encode() and decode() may run concurrently; the word cache has a lock.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessera/data/added_token_matcher.h"
#include "tessera/data/regex_splitter.h"
#include "tessera/data/tokenizer.h"

namespace tessera::data {

// One pre-tokenizer step: optionally a space prepended to each piece that does not
// start with one (ByteLevel's add_prefix_space), then a regex split ("" for none).
struct PreTokenizerStep {
  std::string split_pattern;
  bool add_prefix_space = false;
};

// A byte-level BPE tokenizer as tokenizer.json describes it. Vocabulary and merge
// strings are in GPT-2's byte-to-unicode form ("Ġthe" for " the").
struct BpeSpec {
  std::string source;  // the file(s) read, for messages
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // by rank, first is rank 0
  std::vector<AddedToken> added_tokens;
  std::vector<PreTokenizerStep> steps;  // in order; the ByteLevel step is the last
  bool ignore_merges = false;           // a word found whole in the vocabulary is one token
};

class BpeTokenizer : public Tokenizer {
 public:
  static constexpr size_t kCacheWords = 1 << 18;

  explicit BpeTokenizer(const BpeSpec& spec);

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(bytes_of_id_.size()); }
  std::string description() const override { return "byte-level BPE from " + source_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  void load_vocab(const BpeSpec& spec);
  void load_merges(const BpeSpec& spec);
  // The ids of one pre-tokenized word (raw bytes), through the cache.
  void encode_word(std::string_view word, std::vector<int64_t>& out) const;
  // BPE merges over the bytes of `word`, uncached.
  std::vector<int32_t> merge_word(std::string_view word) const;
  // Runs the pre-tokenizer steps over one stretch of text without added tokens.
  void pre_tokenize(std::string_view text, std::vector<std::string>& words) const;

  std::string source_;
  std::vector<std::string> bytes_of_id_;  // decode: raw bytes of each id
  std::unordered_map<std::string, int32_t> id_of_bytes_;
  int32_t byte_id_[256];  // id of each single byte, -1 when the vocabulary lacks it
  std::unordered_map<uint64_t, Merge> merges_;
  AddedTokenMatcher added_;
  std::vector<PreTokenizerStep> steps_;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;  // one per step, null for none
  bool ignore_merges_ = false;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace tessera::data
