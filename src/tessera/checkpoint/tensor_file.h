// Tensor files (.tsr): the checkpoint shard format, a fixed header, a JSON index
// and raw little-endian tensor bytes. Reading one never runs code from the file
// (unlike pickle), and a reader can check sizes before allocating.
//
//   bytes [0, 8)    magic "TSRTNSR1"
//   bytes [8, 16)   uint64 length L of the JSON index
//   bytes [16, 16+L) JSON: {"tensors": [{"name", "dtype", "shape", "offset", "nbytes",
//                                         "crc32c", and for a piece "full_shape",
//                                         "flat_offset"}]}  (checkpoint_manifest.h)
//   then each tensor's bytes at its offset (64-byte aligned), contiguous, row-major.
//
// Free functions; thread-safe on distinct files.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/checkpoint/checkpoint_manifest.h"

namespace tessera::checkpoint {

// One piece of a sharded tensor: `data` (any shape; written flattened) holds the
// elements [flat_offset, flat_offset + data.numel()) of a tensor of full_shape.
struct TensorPiece {
  std::string name;
  at::Tensor data;
  std::vector<int64_t> full_shape;
  int64_t flat_offset = 0;
};

struct WrittenFile {
  uint64_t size = 0;
  uint32_t crc = 0;
  std::vector<TensorEntry> tensors;
};

// Writes tensors to `path` via a temp file, fsync (if do_fsync) and rename, and
// returns size, CRC-32C and index. CheckpointError naming the path on I/O failure
// or an unsupported dtype; Error if two tensors share a name (pieces: a name
// and a flat_offset; one file may hold several pieces of a tensor).
WrittenFile write_tensor_file(const std::string& path,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                              bool do_fsync);
// The same with pieces of sharded tensors after the whole tensors. Every entry
// records the CRC-32C of its own bytes.
WrittenFile write_tensor_file(const std::string& path,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                              const std::vector<TensorPiece>& pieces, bool do_fsync);

// Parses a whole file held in memory (already checksummed): CheckpointError
// naming `source` if the header or index is malformed, a tensor's shape, dtype and
// byte count disagree (or its size overflows), or it points outside the data.
// Never reads outside `bytes`; allocates in proportion to the index's length.
std::vector<TensorEntry> parse_tensor_index(const std::string& bytes, const std::string& source);
// Builds a CPU tensor from entry's bytes inside `bytes`. Checks the entry as
// parse_tensor_index does before allocating (CheckpointError naming `source`), so
// the tensor is never larger than `bytes`.
at::Tensor tensor_from_bytes(const std::string& bytes, const TensorEntry& entry,
                             const std::string& source);

// Reads only the header and index of the file at `path` (which must have
// file_size bytes), checked as parse_tensor_index does. CheckpointError naming it.
std::vector<TensorEntry> read_tensor_index(const std::string& path, uint64_t file_size);
// Reads one tensor's bytes from the file at `path` and, when the entry records
// one, checks their CRC-32C: CheckpointError naming the file and the tensor if the
// file is shorter than the entry says (truncated) or the bytes do not match
// (corrupted). A piece comes back 1-D.
at::Tensor read_tensor(const std::string& path, const TensorEntry& entry);

// Reads a whole file; CheckpointError naming it if missing or unreadable.
std::string read_file_bytes(const std::string& path);
// Atomic small-file replace: temp + fsync + rename + fsync of the directory.
void write_file_atomic(const std::string& path, const std::string& contents, bool do_fsync);

}  // namespace tessera::checkpoint
