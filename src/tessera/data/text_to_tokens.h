// text_to_tokens: `tessera data prepare`, turning text into llm.c .bin token files
// of byte tokens (vocabulary 256) that TokenFileDataset memory-maps.
//
// The input (a file or a directory, read as ByteTextDataset reads it) is split
// like ByteTextDataset: the first (1 - val_fraction) bytes go to `output`, the
// rest to `val_output`. Each file is written to a temp name and renamed, so a
// crash never leaves a half-written token file under the final name.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::data {

struct PrepareOptions {
  std::string input;        // text file or directory
  std::string output;       // train .bin
  double val_fraction = 0;  // in [0, 1); > 0 requires val_output
  std::string val_output;   // val .bin
};

struct PrepareResult {
  int64_t files_read = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
};

// ConfigError naming the option or path when something is wrong.
PrepareResult prepare_token_files(const PrepareOptions& options);

}  // namespace tessera::data
