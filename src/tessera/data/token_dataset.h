// TokenDataset: the common face of token sources for language-model training. A
// dataset is a flat sequence of num_tokens() token ids; a training example is a
// window x = tokens[i, i+T) with targets y = tokens[i+1, i+T+1).
//
// Two ways to index examples:
//   * by start position: get(i, T) for any 0 <= i < num_windows(T);
//   * by block: block k is the window starting at k*T, for 0 <= k < num_blocks(T).
//     Blocks don't overlap, so a DistributedSampler over num_blocks(T) gives each
//     rank disjoint data every epoch.
//
// Implementations: TokenFileDataset (llm.c .bin files, memory-mapped) and
// ByteTextDataset (text files read as bytes). Reads are const and thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera::data {

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;

  virtual int64_t num_tokens() const = 0;
  // Copies tokens [start, start+count) into out as int64. Precondition: in range.
  virtual void copy_tokens(int64_t start, int64_t count, int64_t* out) const = 0;
  // Size of the vocabulary the ids come from (256 for bytes; 65536 is the uint16
  // bound of token files, whose real vocabulary the file does not record).
  virtual int64_t vocab_size() const = 0;
  // Where the tokens came from, for error messages.
  virtual std::string source() const = 0;

  // Number of valid window starts for sequence length T: num_tokens() - T (>= 0).
  int64_t num_windows(int64_t block_size) const;
  // Number of non-overlapping blocks: (num_tokens() - 1) / T.
  int64_t num_blocks(int64_t block_size) const;

  // (x, y), each int64 [T], for the window starting at token i. tessera::Error
  // naming the dataset if i is out of range.
  std::pair<at::Tensor, at::Tensor> get(int64_t i, int64_t block_size) const;
  // (x, y), each int64 [B, T], for blocks block_indices (e.g. a sampler batch).
  std::pair<at::Tensor, at::Tensor> get_blocks(const std::vector<int64_t>& block_indices,
                                               int64_t block_size) const;
};

}  // namespace tessera::data
