// TokenFileDataset: a token file in the llm.c / nanoGPT `.bin` layout, memory-mapped
// read-only so a job of many ranks shares one page-cache copy.
//
// Layout (llm.c's dev/data format): a header of 256 little-endian int32 —
// [0] magic, [1] version, [2] number of tokens — then the tokens, little-endian:
// magic 20240520 version 1 holds uint16 tokens (GPT-2-sized vocabularies),
// magic 20240801 version 7 uint32 tokens (llm.c's Llama 3 files: vocabularies
// past 65536 ids). The constructor validates all of it: a missing
// file, a wrong magic or version, or a size that does not match the token count
// (truncated or trailing bytes) is a ConfigError naming the file and the problem.
// The header check itself is parse_token_file_header(), a pure function over bytes
// (tests/fuzz fuzzes it).
//
// Owns the mapping (unmapped on destruction); not copyable. Reads are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/data/token_dataset.h"

namespace tessera::data {

constexpr int32_t kTokenFileMagic = 20240520;  // uint16 tokens
constexpr int32_t kTokenFileVersion = 1;
constexpr int32_t kTokenFileMagic32 = 20240801;  // uint32 tokens
constexpr int32_t kTokenFileVersion32 = 7;
constexpr int64_t kTokenFileHeaderInts = 256;
constexpr int64_t kTokenFileHeaderBytes = kTokenFileHeaderInts * 4;

// What a token file's header says, once parse_token_file_header() has checked it.
struct TokenFileHeader {
  int64_t num_tokens = 0;      // in [0, 2^31)
  int bytes_per_token = 2;     // 2 (uint16) or 4 (uint32)
};

// Checks the llm.c header of a token file without touching the file: `data` holds
// the file's first `size` bytes (only the first kTokenFileHeaderBytes are read)
// and `file_size` is the whole file's size. ConfigError naming `source` when the
// file or `size` is shorter than the header, the magic or version is wrong, the
// token count is negative, or file_size is not exactly the header plus the
// counted tokens (truncated or trailing bytes).
TokenFileHeader parse_token_file_header(const void* data, size_t size, uint64_t file_size,
                                        const std::string& source);

class TokenFileDataset : public TokenDataset {
 public:
  explicit TokenFileDataset(const std::string& path);
  ~TokenFileDataset() override;
  TokenFileDataset(const TokenFileDataset&) = delete;
  TokenFileDataset& operator=(const TokenFileDataset&) = delete;

  int64_t num_tokens() const override { return num_tokens_; }
  void copy_tokens(int64_t start, int64_t count, int64_t* out) const override;
  // The bound of the file's token width: 65536 (uint16) or 2^32 (uint32).
  int64_t vocab_size() const override { return int64_t{1} << (8 * bytes_per_token_); }
  std::string source() const override { return path_; }

  int bytes_per_token() const { return bytes_per_token_; }
  // Token i (precondition: 0 <= i < num_tokens()).
  int64_t token(int64_t i) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const unsigned char* tokens_ = nullptr;  // little-endian, bytes_per_token_ each
  int bytes_per_token_ = 2;
  int64_t num_tokens_ = 0;
};

// Writes tokens as an llm.c .bin file through a temp file, fsync and rename, so a
// reader never sees a partial file: uint16 tokens (version 1), or uint32 tokens
// (version 7) from the second overload. ConfigError naming the path on I/O failure.
void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens);
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens);

}  // namespace tessera::data
