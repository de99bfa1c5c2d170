// text_to_tokens: `tessera data prepare`, turning text into llm.c .bin token files
// that TokenFileDataset memory-maps: byte tokens (vocabulary 256) by default, or the
// ids of a checkpoint's tokenizer (data/tokenizer.h) given as `tokenizer`.
//
// The input (a file or a directory, read as ByteTextDataset reads it) is split
// like ByteTextDataset: the first (1 - val_fraction) tokens go to `output`, the
// rest to `val_output`. With a tokenizer the whole text is encoded in one call
// (ids identical to Hugging Face's for the concatenated text; memory is about 8
// bytes per token) and then split. Tokens are written as uint16 (llm.c's
// version 1) when the vocabulary has at most 65536 ids, and as uint32 (llm.c's
// Llama 3 layout, version 7) when it has more, as Llama 3's 128256 does. Each
// file is written to a temp name and renamed, so a crash never leaves a
// half-written token file under the final name.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::data {

struct PrepareOptions {
  std::string input;        // text file or directory
  std::string output;       // train .bin
  double val_fraction = 0;  // in [0, 1); > 0 requires val_output
  std::string val_output;   // val .bin
  std::string tokenizer;    // load_tokenizer() path; "" for byte tokens
};

struct PrepareResult {
  int64_t files_read = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::string tokenizer;  // what encoded the text: "bytes" or Tokenizer::description()
  int bytes_per_token = 2;  // of the files written: 2 (uint16) or 4 (uint32)
};

// ConfigError naming the option or path when something is wrong.
PrepareResult prepare_token_files(const PrepareOptions& options);

}  // namespace tessera::data
