// The tensors of a Hugging Face model directory, as `save_pretrained` lays them
// out: either one `model.safetensors`, or shards `model-00001-of-0000N.safetensors`
// with `model.safetensors.index.json` mapping each tensor name to its shard
// ({"metadata": {"total_size": bytes}, "weight_map": {"name": "file", ...}}).
//
// HfCheckpoint reads such a directory: every shard is memory-mapped
// (checkpoint/safetensors.h), so opening costs the headers, and a tensor is a
// view of its shard's mapping until someone copies it. write_hf_tensors writes
// the same layout, and export_hf_directory a whole model directory atomically.
// Model-specific meaning (names, shapes, config.json) lives in the model's own
// files (gpt2_checkpoint.h, llama_checkpoint.h).
//
// Errors are CheckpointError naming the directory, the file and the problem.
// An HfCheckpoint is immutable after open(): its methods may be called from
// several threads at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessera/checkpoint/safetensors.h"

namespace tessera::runtime::hf {

// File names save_pretrained uses.
inline constexpr const char* kSafetensorsFile = "model.safetensors";
inline constexpr const char* kSafetensorsIndexFile = "model.safetensors.index.json";
inline constexpr const char* kConfigFile = "config.json";

// Whether a tensor name ends with `tail` (".attn.bias"): how the importers
// recognise the buffers a Hugging Face file holds beside the weights.
inline bool ends_with(const std::string& name, const std::string& tail) {
  return name.size() >= tail.size() &&
         name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

class HfCheckpoint {
 public:
  // Opens `dir`'s index when it has one (every shard it names must exist, and
  // hold the tensors the index assigns to it), else its model.safetensors.
  // CheckpointError when `dir` has neither (a directory holding only
  // pytorch_model.bin is named as such: re-save it with safetensors), or when a
  // file or the index is malformed.
  static HfCheckpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // Every tensor name, in the order of the shards and of each shard's header.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  // dtype, shape and byte range; CheckpointError if there is no such tensor.
  const checkpoint::SafetensorsInfo& info(const std::string& name) const;
  // A CPU tensor over its shard's mapping (no copy); CheckpointError if absent.
  at::Tensor tensor(const std::string& name) const;
  // The shard file (its path) that holds `name`; CheckpointError if absent.
  const std::string& file_of(const std::string& name) const;

 private:
  HfCheckpoint() = default;
  size_t shard_of(const std::string& name) const;
  void add_shard(checkpoint::SafetensorsFile file);

  std::string dir_;
  std::vector<checkpoint::SafetensorsFile> shards_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, size_t> where_;  // name -> index into shards_
};

// Writes `tensors` (in order) into `dir`, which must exist: one model.safetensors
// when their bytes fit `max_shard_bytes`, else consecutive shards
// model-0000i-of-0000N.safetensors, each closed before it would pass the limit
// (a tensor larger than the limit gets a shard of its own), and
// model.safetensors.index.json written after every shard. Every file carries
// `metadata` and is replaced atomically (write_safetensors). Returns the file
// names written, index last. CheckpointError when max_shard_bytes is 0 or on
// any error of write_safetensors.
std::vector<std::string> write_hf_tensors(
    const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata, uint64_t max_shard_bytes);

// The tensor `name` of `ckpt` (a view of its mapping), after checking that its
// shape is `shape` and its dtype floating point: CheckpointError naming the
// directory, the file, both shapes and `expected_from` (what asks for the shape,
// e.g. "config.json") otherwise. The importers call it for every tensor before
// they write any parameter, so a refused checkpoint leaves the model untouched.
at::Tensor checked_tensor(const HfCheckpoint& ckpt, const std::string& name,
                          const std::vector<int64_t>& shape, const char* expected_from);

// How export_hf_directory writes.
struct HfExportOptions {
  // Largest shard: model.safetensors alone when everything fits, else
  // model-0000i-of-0000N.safetensors plus model.safetensors.index.json.
  // transformers' default is 5 GB too.
  uint64_t max_shard_bytes = 5'000'000'000ULL;
  // An existing non-empty `dir` is replaced only when true.
  bool overwrite = false;
};

// Writes a model directory as save_pretrained does: `tensors` (CPU, contiguous)
// with metadata {"format": "pt"}, then config.json holding `config_text`.
// Everything goes into a temporary directory beside `dir` (each file fsynced)
// that is renamed to `dir` at the end, so `dir` is either absent, its old
// contents, or the whole export. With overwrite, an old `dir` is moved aside
// just before the rename and removed after it. CheckpointError (its message
// starting with `what`, e.g. "export_llama") when `dir` exists, is not empty
// and overwrite is false, or on an I/O error (the temporary directory is
// removed).
void export_hf_directory(const std::string& dir,
                         const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                         const std::string& config_text, const HfExportOptions& options,
                         const char* what);

// Replaces `path` with `text` atomically (temp file, fsync, rename): the way
// config.json and the index are written. CheckpointError naming the path.
void write_text_file_atomically(const std::string& path, const std::string& text);

}  // namespace tessera::runtime::hf
