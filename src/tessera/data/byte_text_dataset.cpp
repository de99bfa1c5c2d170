#include "tessera/data/byte_text_dataset.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tessera/core/check.h"

namespace tessera::data {

namespace fs = std::filesystem;

std::vector<std::string> list_text_files(const std::string& path) {
  std::error_code ec;
  auto st = fs::status(path, ec);
  TS_CHECK_T(ConfigError, !ec && fs::exists(st), "text input ", path,
             " does not exist; pass a text file or a directory of text files");
  if (fs::is_regular_file(st)) return {path};
  TS_CHECK_T(ConfigError, fs::is_directory(st), "text input ", path,
             " is neither a regular file nor a directory");
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    // Symlinks are skipped so aliases (GPL -> GPL-3) don't duplicate text.
    if (it->is_symlink()) continue;
    if (it->is_regular_file()) files.push_back(it->path().string());
  }
  TS_CHECK_T(ConfigError, !ec, "cannot list directory ", path, ": ", ec.message());
  std::sort(files.begin(), files.end());
  TS_CHECK_T(ConfigError, !files.empty(), "directory ", path, " holds no regular files");
  return files;
}

std::vector<uint8_t> read_text_bytes(const std::string& path) {
  std::vector<uint8_t> out;
  for (const auto& file : list_text_files(path)) {
    std::ifstream in(file, std::ios::binary);
    TS_CHECK_T(ConfigError, in.good(), "cannot read text file ", file);
    out.insert(out.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    TS_CHECK_T(ConfigError, !in.bad(), "error while reading text file ", file);
  }
  return out;
}

ByteTextDataset::ByteTextDataset(const std::string& path, ByteTextOptions options) : path_(path) {
  TS_CHECK_T(ConfigError, options.val_fraction >= 0 && options.val_fraction < 1,
             "val_fraction must be in [0, 1), got ", options.val_fraction);
  std::vector<uint8_t> all = read_text_bytes(path);
  const auto n = static_cast<int64_t>(all.size());
  const auto n_train = static_cast<int64_t>(static_cast<double>(n) * (1.0 - options.val_fraction));
  if (options.split == Split::kTrain) {
    all.resize(static_cast<size_t>(n_train));
    bytes_ = std::move(all);
  } else {
    bytes_.assign(all.begin() + n_train, all.end());
  }
  TS_CHECK_T(ConfigError, !bytes_.empty(), "the ",
             options.split == Split::kTrain ? "train" : "validation", " split of ", path,
             " is empty (", n, " bytes, val_fraction ", options.val_fraction, ")");
}

void ByteTextDataset::copy_tokens(int64_t start, int64_t count, int64_t* out) const {
  TS_CHECK(start >= 0 && count >= 0 && start + count <= num_tokens(), "tokens [", start, ", ",
           start + count, ") are outside ", path_, " (", num_tokens(), " bytes)");
  for (int64_t i = 0; i < count; ++i) out[i] = bytes_[static_cast<size_t>(start + i)];
}

std::string bytes_to_string(const at::Tensor& tokens) {
  at::Tensor t = tokens.reshape({-1}).to(at::kLong).contiguous().cpu();
  std::string s;
  s.reserve(static_cast<size_t>(t.numel()));
  const int64_t* p = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    s.push_back(p[i] >= 0 && p[i] < 256 ? static_cast<char>(p[i]) : '?');
  }
  return s;
}

}  // namespace tessera::data
