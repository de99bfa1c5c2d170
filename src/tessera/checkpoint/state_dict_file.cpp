#include "tessera/checkpoint/state_dict_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unordered_set>

#include "tessera/core/check.h"

namespace tessera::checkpoint {

namespace fs = std::filesystem;

void save_state_dict_file(const std::string& path, const NamedTensors& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  std::unordered_set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    TS_CHECK_T(CheckpointError, seen.insert(name).second, "state dict for '", path,
               "' names tensor '", name, "' twice");
    dict.insert(name, t.detach().to(at::kCPU).contiguous().clone());
  }
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TS_CHECK_T(CheckpointError, fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      TS_THROW(CheckpointError, "cannot write '", tmp, "': ", std::strerror(err),
               "; check free disk space");
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) {
    ::unlink(tmp.c_str());
    TS_THROW(CheckpointError, "cannot flush '", tmp, "' to disk: ", std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    TS_THROW(CheckpointError, "cannot rename '", tmp, "' to '", path, "': ", ec.message());
  }
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
