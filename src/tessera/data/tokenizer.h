// Tokenizer: text to token ids with a checkpoint's own tokenizer, giving the ids
// Hugging Face `tokenizers` gives for `encode(text, add_special_tokens=False)`:
// the text's own tokens, no BOS/EOS or other template added.
//
// Two kinds, picked by load_tokenizer() from the path:
//   * BpeTokenizer (bpe_tokenizer.h): byte-level BPE, from a tokenizer.json whose
//     model is BPE with a ByteLevel pre-tokenizer (GPT-2, Llama-3, ...), or from a
//     GPT-2 style vocab.json + merges.txt pair;
//   * SentencePieceTokenizer (sentencepiece_tokenizer.h): a SentencePiece
//     `*.model` file (Llama-2, T5, ...) run by libsentencepiece.
//
// Errors: loading throws ConfigError naming the file and the problem (missing,
// malformed, a model or pre-tokenizer kind that is not supported). encode() throws
// ConfigError when the text is not valid UTF-8 (the offset is named); decode()
// throws ConfigError for an id outside [0, vocab_size()).
//
// Threads: a loaded tokenizer is immutable apart from internal caches guarded by
// their own lock, so encode() and decode() may run concurrently on one object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text` (UTF-8). Added/special tokens written in the text (e.g.
  // "<|endoftext|>") become their single id, as Hugging Face matches them.
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;

  // The text of `ids`. For byte-level BPE, added tokens are written out as their
  // text, not skipped, and decode(encode(x)) == x for any valid UTF-8 x unless an
  // added token with lstrip/rstrip took whitespace. SentencePiece decodes as
  // libsentencepiece does (control symbols give no text, the dummy prefix goes).
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;

  // One past the largest id encode() can return (added tokens included).
  virtual int64_t vocab_size() const = 0;

  // What was loaded, for messages: "byte-level BPE from /path/tokenizer.json".
  virtual std::string description() const = 0;
};

// Loads the tokenizer at `path`: a directory holding tokenizer.json, or
// vocab.json + merges.txt, or tokenizer.model (or a single *.model), searched in
// that order; or one of those files itself. ConfigError naming the path and what
// was looked for when nothing fits.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace tessera::data
