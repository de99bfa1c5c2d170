#include "tessera/checkpoint/sharded_tensors.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "tessera/core/check.h"

namespace tessera::checkpoint {
namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

CheckpointTensors::CheckpointTensors(const CheckpointReader& reader) : reader_(reader) {
  const std::string where = "checkpoint " + reader.path();
  for (const auto& file : reader.manifest().files) {
    const bool replicated = file.kind == FileKind::kReplicated;
    for (const auto& e : file.tensors) {
      if (!replicated && !e.is_piece) continue;  // a rank's own state
      const std::vector<int64_t>& shape = e.is_piece ? e.full_shape : e.shape;
      Source src{&file, &e, e.is_piece ? e.flat_offset : 0, numel_of(e.shape)};
      auto [it, fresh] = by_name_.try_emplace(e.name);
      Assembled& a = it->second;
      if (fresh) {
        a.info.name = e.name;
        a.info.dtype = e.dtype;
        a.info.shape = shape;
        a.info.numel = numel_of(shape);
      }
      TS_CHECK_T(CheckpointError, a.info.dtype == e.dtype && a.info.shape == shape, where,
                 ": the pieces of tensor '", e.name, "' disagree on dtype or shape (",
                 file.path, " holds ", e.dtype, " ", at::IntArrayRef(shape), ", another file ",
                 a.info.dtype, " ", at::IntArrayRef(a.info.shape), ")");
      a.sources.push_back(src);
    }
  }
  for (auto& [name, a] : by_name_) {
    auto& s = a.sources;
    std::stable_sort(s.begin(), s.end(), [](const Source& x, const Source& y) {
      return x.begin != y.begin ? x.begin < y.begin : x.numel < y.numel;
    });
    std::vector<Source> tiled;
    int64_t covered = 0;
    for (const auto& src : s) {
      if (!tiled.empty() && src.begin == tiled.back().begin && src.numel == tiled.back().numel) {
        continue;  // the same range from another rank
      }
      TS_CHECK_T(CheckpointError, src.begin <= covered, where, ": tensor '", name,
                 "' has no file holding its elements [", covered, ", ", src.begin,
                 "); a rank's shard is missing from the checkpoint");
      TS_CHECK_T(CheckpointError, src.begin == covered, where, ": tensor '", name,
                 "' has pieces that overlap at element ", src.begin, " (", src.file->path,
                 "); the checkpoint mixes saves of different runs");
      tiled.push_back(src);
      covered += src.numel;
    }
    TS_CHECK_T(CheckpointError, covered == a.info.numel, where, ": tensor '", name,
               "' has no file holding its elements [", covered, ", ", a.info.numel,
               "); a rank's shard is missing from the checkpoint");
    s = std::move(tiled);
    a.info.pieces = s.size();
    const auto& e = *s.front().entry;
    const uint64_t elem = e.shape.empty() || numel_of(e.shape) == 0
                              ? 0
                              : e.nbytes / static_cast<uint64_t>(numel_of(e.shape));
    a.info.nbytes = elem * static_cast<uint64_t>(a.info.numel);
  }
}

std::vector<TensorInfo> CheckpointTensors::tensors() const {
  std::vector<TensorInfo> out;
  for (const auto& [name, a] : by_name_) out.push_back(a.info);
  return out;
}

const CheckpointTensors::Assembled& CheckpointTensors::find(const std::string& name) const {
  auto it = by_name_.find(name);
  TS_CHECK_T(CheckpointError, it != by_name_.end(), "checkpoint ", reader_.path(),
             " has no tensor '", name, "'; was it saved from a different model or optimizer?");
  return it->second;
}

const TensorInfo& CheckpointTensors::info(const std::string& name) const {
  return find(name).info;
}

at::Tensor CheckpointTensors::read(const std::string& name) const {
  const Assembled& a = find(name);
  return read_flat(name, 0, a.info.numel).reshape(a.info.shape);
}

at::Tensor CheckpointTensors::read_flat(const std::string& name, int64_t begin,
                                        int64_t numel) const {
  const Assembled& a = find(name);
  TS_CHECK_T(CheckpointError, begin >= 0 && numel >= 0 && begin + numel <= a.info.numel,
             "checkpoint ", reader_.path(), ": elements [", begin, ", ", begin + numel,
             ") are outside tensor '", name, "' of ", a.info.numel,
             " elements; is the model the one that was saved?");
  if (numel == 0) {  // still the tensor's dtype
    const Source& src = a.sources.front();
    return reader_.read_tensor(*src.file, *src.entry).reshape({-1}).narrow(0, 0, 0);
  }
  at::Tensor out;
  for (const auto& src : a.sources) {
    const int64_t lo = std::max(begin, src.begin);
    const int64_t hi = std::min(begin + numel, src.begin + src.numel);
    if (lo >= hi) continue;
    at::Tensor piece = reader_.read_tensor(*src.file, *src.entry).reshape({-1});
    if (!out.defined()) out = at::empty({numel}, piece.options());
    out.narrow(0, lo - begin, hi - lo).copy_(piece.narrow(0, lo - src.begin, hi - lo));
  }
  return out;
}

NamedTensors CheckpointTensors::read_all(const std::string& prefix) const {
  NamedTensors out;
  for (const auto& [name, a] : by_name_) {
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name, read(name));
  }
  return out;
}

}  // namespace tessera::checkpoint
