// CheckpointTensors: every tensor of a checkpoint as a whole, whatever pieces the
// ranks that saved it wrote. This is what makes a checkpoint "universal": a ZeRO
// run at one world size saves each rank's shards as pieces (TensorEntry with a
// full_shape, checkpoint_manifest.h); a later run at another world size or stage
// reads back the whole tensor or exactly the flat range it now owns.
//
//   auto reader = CheckpointReader::open(dir, CheckpointReader::Verify::kIndex);
//   CheckpointTensors all(reader);
//   at::Tensor w = all.read("model.wte.weight");                 // full shape
//   at::Tensor s = all.read_flat("model.wte.weight", 4096, 512);  // 1-D, 512 elements
//
// The tensors are the replicated file's and every piece of every rank file. A
// rank file's whole tensors (its RNG state) are that rank's own and are not
// included: read them with reader.per_rank(r).
//
// Pieces of one tensor must agree on dtype and full shape and must tile its
// elements: the same range saved by several ranks (a scalar every rank keeps) is
// read once, but ranges that partly overlap, or elements no file holds, are a
// CheckpointError naming the tensor, found when the index is built, before
// anything is read. Reading checks every piece's CRC-32C (tensor_file.h).
//
// Holds a reference to the reader, which must outlive it. Const reads are
// thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/checkpoint/checkpoint_reader.h"

namespace tessera::checkpoint {

struct TensorInfo {
  std::string name;
  std::string dtype;           // c10 ScalarType name
  std::vector<int64_t> shape;  // the whole tensor's
  int64_t numel = 0;
  uint64_t nbytes = 0;  // of the whole tensor
  size_t pieces = 0;    // files that hold part of it (1 for a whole tensor)
};

class CheckpointTensors {
 public:
  explicit CheckpointTensors(const CheckpointReader& reader);

  // Sorted by name.
  std::vector<TensorInfo> tensors() const;
  bool contains(const std::string& name) const { return by_name_.count(name) > 0; }
  // CheckpointError naming the tensor when the checkpoint has none of that name.
  const TensorInfo& info(const std::string& name) const;
  // The whole tensor, in its full shape, on the CPU.
  at::Tensor read(const std::string& name) const;
  // Elements [begin, begin + numel) of the flattened tensor, 1-D. CheckpointError
  // if the range lies outside it.
  at::Tensor read_flat(const std::string& name, int64_t begin, int64_t numel) const;
  // Every tensor whose name starts with `prefix`, whole, sorted by name.
  NamedTensors read_all(const std::string& prefix = "") const;

 private:
  struct Source {
    const FileEntry* file = nullptr;
    const TensorEntry* entry = nullptr;
    int64_t begin = 0;  // flat range it holds
    int64_t numel = 0;
  };
  struct Assembled {
    TensorInfo info;
    std::vector<Source> sources;  // sorted by begin, tiling [0, numel)
  };
  const Assembled& find(const std::string& name) const;

  const CheckpointReader& reader_;
  std::map<std::string, Assembled> by_name_;
};

}  // namespace tessera::checkpoint
