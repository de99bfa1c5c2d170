// SentencePieceTokenizer: a SentencePiece model file (`tokenizer.model` of Llama-2,
// Mistral, T5, ...) run by libsentencepiece, the library that trained it, so the
// ids are SentencePiece's own: its normalization, dummy prefix, byte fallback and
// BPE or Unigram search. Hugging Face's fast tokenizer converted from the same
// model (LlamaTokenizerFast, T5TokenizerFast) gives the same ids on ordinary text;
// the tests check that for a BPE model with byte fallback.
//
// encode() adds no BOS/EOS (as HF with add_special_tokens=False). The model's
// control symbols and unknown piece written in the text ("<s>", "</s>", "<unk>")
// become their ids, and the text between them is encoded piece by piece, each
// with its own dummy prefix: what HF's converted tokenizer does with them as
// added tokens (SentencePiece alone would spell them out as text).
//
// The constructor throws ConfigError naming the file when it is missing or not a
// model, or when Tessera was built without libsentencepiece (libsentencepiece-dev;
// scripts/install-deps.sh installs it). encode() and decode() are const and
// thread-safe, as SentencePieceProcessor's are.
#pragma once

#include <memory>
#include <string>

#include "tessera/data/tokenizer.h"

namespace tessera::data {

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer() override;

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override;
  std::string description() const override { return "SentencePiece model " + path_; }

 private:
  struct Impl;  // keeps sentencepiece_processor.h out of this header
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::data
