// ByteTextDataset: plain text read as bytes (vocabulary 256), the zero-setup data
// `tessera train` uses by default.
//
// The input is one file, or a directory whose regular files (recursively,
// symlinks skipped so aliases like GPL -> GPL-3 are not read twice) are
// concatenated in sorted path order. The bytes are split in two: the first
// (1 - val_fraction) for training, the rest for validation, so train and val never
// share text.
//
// Holds its split's bytes in memory (text corpora here are small). Reads are
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/data/token_dataset.h"

namespace tessera::data {

enum class Split { kTrain, kVal };

struct ByteTextOptions {
  double val_fraction = 0.1;  // in [0, 1)
  Split split = Split::kTrain;
};

class ByteTextDataset : public TokenDataset {
 public:
  // ConfigError naming the path if it is missing, holds no readable file, or the
  // chosen split is empty; or naming val_fraction if out of range.
  ByteTextDataset(const std::string& path, ByteTextOptions options = {});

  int64_t num_tokens() const override { return static_cast<int64_t>(bytes_.size()); }
  void copy_tokens(int64_t start, int64_t count, int64_t* out) const override;
  int64_t vocab_size() const override { return 256; }
  std::string source() const override { return path_; }

  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
};

// All bytes of a file or of a directory's regular files in sorted path order
// (the rule above). ConfigError naming the path on failure.
std::vector<uint8_t> read_text_bytes(const std::string& path);
// The files read_text_bytes reads, in order.
std::vector<std::string> list_text_files(const std::string& path);

// Decodes byte tokens into a string (ids >= 256 become '?'), for printing samples.
std::string bytes_to_string(const at::Tensor& tokens);

}  // namespace tessera::data
