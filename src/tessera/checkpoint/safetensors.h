// safetensors files: the tensor format of Hugging Face checkpoints, read without
// copying and written atomically. The ground for importing and exporting models
// that live on the Hub.
//
//   bytes [0, 8)       little-endian uint64 N
//   bytes [8, 8+N)     UTF-8 JSON header, possibly padded with spaces:
//                      {"<name>": {"dtype": "F32", "shape": [2, 3],
//                                  "data_offsets": [begin, end]}, ...,
//                       "__metadata__": {"key": "value"}}      (optional)
//   bytes [8+N, end)   the data buffer; offsets are relative to its start, and
//                      the tensors tile it exactly: no gap, no overlap.
//
// Tensors are contiguous, row-major, little-endian. dtypes: F64 F32 F16 BF16 I64
// I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2 (at::kFloat8_e4m3fn, at::kFloat8_e5m2).
//
//   auto file = SafetensorsFile::open("model.safetensors");
//   at::Tensor w = file.tensor("lm_head.weight");           // no copy
//   at::Tensor rows = file.slice("lm_head.weight", 0, 512, 512);
//   write_safetensors("out.safetensors", {{"w", w}}, {{"format", "pt"}});
//
// Errors are CheckpointError naming the file and the problem. A SafetensorsFile is
// immutable after open(): its methods may be called from several threads at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::checkpoint {

// Where one tensor lives in a safetensors file.
struct SafetensorsInfo {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  // Byte range [begin, end) relative to the start of the data buffer.
  uint64_t begin = 0;
  uint64_t end = 0;
};

// An open safetensors file: the whole file memory-mapped, its header checked.
//
// Tensors are views of the mapping, not copies: opening a 10 GB file costs its
// header, and a tensor's pages are read from disk when first touched. Each tensor
// holds a reference to the mapping, so it stays valid after the SafetensorsFile
// (and every copy of it) is gone; the mapping is released with the last of them.
//
// The mapping is private and writable (MAP_PRIVATE, PROT_READ | PROT_WRITE), so
// writing into a returned tensor copies the touched pages (copy-on-write): the
// edit never reaches the file or another open() of it. Tensors from the same
// SafetensorsFile share the mapping, so they do see it. The cost: under strict
// overcommit accounting (vm.overcommit_memory=2) the kernel reserves commit
// charge for the whole file.
//
// The file must not be truncated or modified in place while mapped: pages not
// yet touched would show the new bytes, and a page past a new end raises SIGBUS,
// as with any mapping. Replacing it by rename, as write_safetensors does, is
// safe: the mapping keeps the old file.
class SafetensorsFile {
 public:
  // Maps `path` and validates the whole header before returning, so that every
  // later call can only fail on a wrong argument. CheckpointError naming the file
  // if it cannot be opened or mapped, is not a regular file, is shorter than 8
  // bytes, declares a header longer than the file, the header is not a JSON
  // object, a dtype is unknown, a shape disagrees with its byte range, offsets
  // fall outside the data, overlap or leave bytes that belong to no tensor, a
  // tensor name appears twice, or __metadata__ is not an object of strings.
  // Never reads outside the file.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  // Tensor names in the order of the header.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // dtype, shape and byte range of `name`; CheckpointError if the file has no
  // such tensor (the message lists a few names it has).
  const SafetensorsInfo& info(const std::string& name) const;
  // The header's __metadata__ (empty when it has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A CPU tensor of `name` over the mapping, without a copy. When the tensor's
  // bytes are not aligned to its element size (a file whose offsets put an F32 at
  // an odd byte), it returns an aligned copy instead: ATen kernels assume aligned
  // elements. Files written by write_safetensors or by the safetensors library
  // are aligned. CheckpointError if the file has no such tensor.
  at::Tensor tensor(const std::string& name) const;
  // tensor(name).narrow(dim, start, length): the part one rank keeps of a sharded
  // weight, still a view of the mapping (pages outside it are never read). An
  // unaligned tensor copies only the slice. CheckpointError if the file has no
  // such tensor, or dim, start or length fall outside its shape.
  at::Tensor slice(const std::string& name, int64_t dim, int64_t start, int64_t length) const;

 private:
  struct Mapping;
  SafetensorsFile() = default;
  // The tensor of `e`, narrowed to [start, start + length) of `dim` when dim >= 0.
  at::Tensor view(const SafetensorsInfo& e, int64_t dim, int64_t start, int64_t length) const;

  std::string path_;
  std::shared_ptr<const Mapping> mapping_;
  uint64_t data_start_ = 0;  // file offset of the data buffer: 8 + N
  std::vector<std::string> names_;
  std::vector<SafetensorsInfo> infos_;  // in the order of names_
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` in the given order, with `metadata` as __metadata__, to a
// temporary file beside `path`, fsyncs it and renames it over `path`, so `path`
// is either its old contents or the whole new file, never a prefix. The header is
// padded with spaces to a multiple of 8 bytes, as the safetensors library does.
// Non-contiguous tensors are written as their contiguous copies.
//
// CheckpointError, before anything is written, if a name is empty, repeated or
// "__metadata__", a tensor is undefined, not on the CPU, not dense, or of a dtype
// the format lacks; CheckpointError naming the path on an I/O failure, after
// which no temporary file is left behind.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The format's name of a dtype ("F32") and back; CheckpointError naming the
// dtype (and the ones the format has) when there is none.
std::string safetensors_dtype_name(at::ScalarType dtype);
at::ScalarType safetensors_dtype(const std::string& name);

}  // namespace tessera::checkpoint
