// Readers of Hugging Face tokenizer files into a BpeSpec (bpe_tokenizer.h):
//   * tokenizer.json of a byte-level BPE: model "BPE"; pre_tokenizer ByteLevel, or
//     a Sequence of Split (Isolated, a Regex or String pattern) steps ending in
//     ByteLevel; no normalizer; added_tokens with their flags. post_processor and
//     decoder are not read: encode() gives the text's own ids, without templates.
//   * vocab.json + merges.txt (GPT-2's files): ByteLevel with GPT-2's regex and no
//     added tokens, as `tokenizers`' ByteLevelBPETokenizer reads them.
//
// Each throws ConfigError naming the file: missing or unreadable, malformed JSON,
// a missing or mistyped field, a model type other than BPE (Unigram, WordPiece,
// WordLevel: use the SentencePiece .model for those checkpoints), or a normalizer,
// pre-tokenizer or BPE option Tessera does not implement. Pure functions.
#pragma once

#include <string>

#include "tessera/data/bpe_tokenizer.h"

namespace tessera::data {

BpeSpec read_tokenizer_json(const std::string& path);

BpeSpec read_vocab_and_merges(const std::string& vocab_path, const std::string& merges_path);

}  // namespace tessera::data
