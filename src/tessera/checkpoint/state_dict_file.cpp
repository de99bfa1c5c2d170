#include "tessera/checkpoint/state_dict_file.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <iterator>
#include <unordered_set>

#include "tessera/core/atomic_file.h"
#include "tessera/core/check.h"

namespace tessera::checkpoint {

void save_state_dict_file(const std::string& path, const NamedTensors& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  std::unordered_set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    TS_CHECK_T(CheckpointError, seen.insert(name).second, "state dict for '", path,
               "' names tensor '", name, "' twice");
    // A copy of its own: pickle writes a tensor's whole storage, and a parameter
    // may be a view into a larger flat buffer (DDP buckets, ZeRO units).
    dict.insert(name, t.detach().to(at::kCPU).contiguous().clone());
  }
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
  core::replace_file_atomically<CheckpointError>(
      path, "state dict file", /*do_fsync=*/true,
      [&](const auto& write) { write(bytes.data(), bytes.size()); });
}

NamedTensors load_state_dict_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK_T(CheckpointError, in.good(), "cannot open state dict '", path, "'");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const c10::Error& e) {
    TS_THROW(CheckpointError, "'", path, "' is not a torch.save / pickle_save file: ",
             e.what_without_backtrace());
  }
  TS_CHECK_T(CheckpointError, value.isGenericDict(), "'", path,
             "' holds a ", value.tagKind(), ", not a dict of name -> tensor");
  NamedTensors out;
  for (const auto& item : value.toGenericDict()) {
    TS_CHECK_T(CheckpointError, item.key().isString() && item.value().isTensor(), "'", path,
               "' holds an entry that is not string -> tensor");
    out.emplace_back(item.key().toStringRef(), item.value().toTensor());
  }
  return out;
}

}  // namespace tessera::checkpoint
