// One whole state dict in a single file: a name -> tensor dict written with
// LibTorch's torch::pickle_save, the zip format of Python's torch.save. Python
// reads it with `torch.load(path)` into a dict of tensors; C++ reads it with
// load_state_dict_file (or torch::pickle_load). This is the exchange format of
// `tessera ckpt consolidate`; a Tessera checkpoint directory is not.
//
//   save_state_dict_file("gpt.pt", checkpoint::module_state(*model));
//   checkpoint::load_module_state(*model, load_state_dict_file("gpt.pt"));
#pragma once

#include <string>

#include "tessera/checkpoint/checkpoint_writer.h"

namespace tessera::checkpoint {

// Writes `tensors` (contiguous CPU copies; names must be unique) to a temporary
// file beside `path`, fsyncs it and renames it over `path`
// (core::replace_file_atomically), so `path` is either the old file or the whole
// new one. CheckpointError naming the path on an I/O
// failure or a duplicate name.
void save_state_dict_file(const std::string& path, const NamedTensors& tensors);

// The dict in `path`, in its stored order. CheckpointError naming the path when
// it cannot be read or does not hold a dict of string -> tensor.
NamedTensors load_state_dict_file(const std::string& path);

}  // namespace tessera::checkpoint
