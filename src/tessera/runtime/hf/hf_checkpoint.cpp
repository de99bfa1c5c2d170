#include "tessera/runtime/hf/hf_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <system_error>

#include "tessera/core/atomic_file.h"
#include "tessera/core/check.h"

namespace tessera::runtime::hf {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  TS_CHECK_T(CheckpointError, in.good(), "cannot open ", path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw CheckpointError(c10::str(path, " is not valid JSON: ", e.what()));
  }
}

// The index's weight_map grouped by shard: file name -> its tensor names, files
// in name order (model-00001-... first). Each file name must be a plain name
// inside the directory: an index never sends the reader elsewhere.
std::map<std::string, std::vector<std::string>> read_index(const std::string& path) {
  const json index = read_json_file(path);
  TS_CHECK_T(CheckpointError,
             index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
             path, " has no \"weight_map\" object (expected save_pretrained's index: ",
             "{\"metadata\": {...}, \"weight_map\": {\"tensor name\": \"shard file\"}})");
  std::map<std::string, std::vector<std::string>> files;
  for (const auto& [name, file] : index["weight_map"].items()) {
    TS_CHECK_T(CheckpointError, file.is_string(), path, ": weight_map[\"", name,
               "\"] is not a file name");
    const std::string f = file.get<std::string>();
    TS_CHECK_T(CheckpointError,
               !f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", path,
               ": weight_map[\"", name, "\"] = \"", f,
               "\" is not a file name inside the checkpoint directory");
    files[f].push_back(name);
  }
  TS_CHECK_T(CheckpointError, !files.empty(), path, ": weight_map is empty");
  return files;
}

}  // namespace

HfCheckpoint HfCheckpoint::open(const std::string& dir) {
  HfCheckpoint ckpt;
  ckpt.dir_ = dir;
  TS_CHECK_T(CheckpointError, fs::is_directory(dir), "Hugging Face checkpoint ", dir,
             " is not a directory");
  const std::string index_path = (fs::path(dir) / kSafetensorsIndexFile).string();
  const std::string single_path = (fs::path(dir) / kSafetensorsFile).string();
  if (fs::exists(index_path)) {
    for (const auto& [file, names] : read_index(index_path)) {
      const std::string shard = (fs::path(dir) / file).string();
      TS_CHECK_T(CheckpointError, fs::exists(shard), index_path, " names shard ", file,
                 ", which is missing from ", dir, " (an incomplete download or copy?)");
      ckpt.add_shard(checkpoint::SafetensorsFile::open(shard));
      const auto& opened = ckpt.shards_.back();
      for (const auto& name : names) {
        TS_CHECK_T(CheckpointError, opened.contains(name), index_path, " puts tensor ", name,
                   " in ", file, ", which does not hold it");
      }
    }
    return ckpt;
  }
  if (fs::exists(single_path)) {
    ckpt.add_shard(checkpoint::SafetensorsFile::open(single_path));
    return ckpt;
  }
  const bool has_bin = fs::exists(fs::path(dir) / "pytorch_model.bin") ||
                       fs::exists(fs::path(dir) / "pytorch_model.bin.index.json");
  throw CheckpointError(
      c10::str("Hugging Face checkpoint ", dir, " has neither ", kSafetensorsFile, " nor ",
               kSafetensorsIndexFile,
               has_bin ? " (it has pytorch_model.bin, which is not read: load it in Python and "
                         "re-save it with save_pretrained(dir, safe_serialization=True))"
                       : " (is it a model directory written by save_pretrained?)"));
}

void HfCheckpoint::add_shard(checkpoint::SafetensorsFile file) {
  const size_t index = shards_.size();
  for (const auto& name : file.names()) {
    auto [it, added] = where_.emplace(name, index);
    TS_CHECK_T(CheckpointError, added, "Hugging Face checkpoint ", dir_, ": tensor ", name,
               " appears in both ", shards_[it->second].path(), " and ", file.path());
    names_.push_back(name);
  }
  shards_.push_back(std::move(file));
}

size_t HfCheckpoint::shard_of(const std::string& name) const {
  auto it = where_.find(name);
  TS_CHECK_T(CheckpointError, it != where_.end(), "Hugging Face checkpoint ", dir_,
             " has no tensor ", name);
  return it->second;
}

const checkpoint::SafetensorsInfo& HfCheckpoint::info(const std::string& name) const {
  return shards_[shard_of(name)].info(name);
}

at::Tensor HfCheckpoint::tensor(const std::string& name) const {
  return shards_[shard_of(name)].tensor(name);
}

const std::string& HfCheckpoint::file_of(const std::string& name) const {
  return shards_[shard_of(name)].path();
}

void write_text_file_atomically(const std::string& path, const std::string& text) {
  core::replace_file_atomically<CheckpointError>(
      path, "file", /*do_fsync=*/true, [&](const auto& write) { write(text.data(), text.size()); });
}

namespace {

// Consecutive runs of `tensors` whose bytes stay within `limit` (a run holds at
// least one tensor), as [begin, end) index pairs.
std::vector<std::pair<size_t, size_t>> pack_shards(
    const std::vector<std::pair<std::string, at::Tensor>>& tensors, uint64_t limit) {
  std::vector<std::pair<size_t, size_t>> runs;
  uint64_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto n = static_cast<uint64_t>(tensors[i].second.nbytes());
    if (runs.empty() || bytes + n > limit) {
      runs.push_back({i, i});
      bytes = 0;
    }
    runs.back().second = i + 1;
    bytes += n;
  }
  return runs;
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

std::vector<std::string> write_hf_tensors(
    const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata, uint64_t max_shard_bytes) {
  TS_CHECK_T(CheckpointError, max_shard_bytes > 0, "write_hf_tensors: max_shard_bytes must be > 0");
  const auto runs = pack_shards(tensors, max_shard_bytes);
  if (runs.size() <= 1) {
    checkpoint::write_safetensors((fs::path(dir) / kSafetensorsFile).string(), tensors, metadata);
    return {kSafetensorsFile};
  }
  std::vector<std::string> files;
  json weight_map = json::object();
  uint64_t total = 0;
  for (size_t s = 0; s < runs.size(); ++s) {
    files.push_back(shard_name(s, runs.size()));
    std::vector<std::pair<std::string, at::Tensor>> part(tensors.begin() + runs[s].first,
                                                         tensors.begin() + runs[s].second);
    for (const auto& [name, t] : part) {
      weight_map[name] = files.back();
      total += static_cast<uint64_t>(t.nbytes());
    }
    checkpoint::write_safetensors((fs::path(dir) / files.back()).string(), part, metadata);
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_text_file_atomically((fs::path(dir) / kSafetensorsIndexFile).string(),
                             index.dump(2) + "\n");
  files.push_back(kSafetensorsIndexFile);
  return files;
}

at::Tensor checked_tensor(const HfCheckpoint& ckpt, const std::string& name,
                          const std::vector<int64_t>& shape, const char* expected_from) {
  const auto& info = ckpt.info(name);
  TS_CHECK_T(CheckpointError, info.shape == shape, "Hugging Face checkpoint ", ckpt.dir(),
             ": tensor ", name, " (in ", ckpt.file_of(name), ") has shape ",
             c10::IntArrayRef(info.shape), " but ", expected_from, " needs ",
             c10::IntArrayRef(shape));
  TS_CHECK_T(CheckpointError, at::isFloatingType(info.dtype), "Hugging Face checkpoint ",
             ckpt.dir(), ": tensor ", name, " has dtype ", info.dtype,
             ", not a floating-point type");
  return ckpt.tensor(name);
}

namespace {

// Moves the finished temporary directory to `dir`, setting aside and then
// removing an old `dir` (checked by the caller to be empty or overwritable).
void publish(const std::string& tmp, const std::string& dir) {
  std::string old;
  if (fs::exists(dir)) {
    if (fs::is_empty(dir)) {
      fs::remove(dir);
    } else {
      old = core::temp_path_beside(dir);
      fs::rename(dir, old);
    }
  }
  try {
    fs::rename(tmp, dir);
  } catch (...) {
    std::error_code ignored;
    if (!old.empty()) fs::rename(old, dir, ignored);  // put the old export back
    throw;
  }
  core::fsync_directory<CheckpointError>(fs::path(dir).parent_path().string());
  if (!old.empty()) fs::remove_all(old);
}

}  // namespace

void export_hf_directory(const std::string& dir_arg,
                         const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                         const std::string& config_text, const HfExportOptions& options,
                         const char* what) {
  // "out/" and "out" name the same directory; the temporary one goes beside it.
  fs::path normal = fs::path(dir_arg).lexically_normal();
  if (normal.filename().empty()) normal = normal.parent_path();
  const std::string dir = normal.string();
  TS_CHECK_T(CheckpointError, !dir.empty() && dir != "." && dir != "..", what, ": \"", dir_arg,
             "\" does not name a directory to create");
  if (fs::exists(dir)) {
    TS_CHECK_T(CheckpointError, fs::is_directory(dir), what, ": ", dir,
               " exists and is not a directory");
    TS_CHECK_T(CheckpointError, fs::is_empty(dir) || options.overwrite, what, ": ", dir,
               " exists and is not empty (remove it, choose another directory, or set overwrite "
               "in the export options)");
  }
  const fs::path parent = fs::absolute(dir).parent_path();
  const std::string tmp = core::temp_path_beside(dir);
  try {
    fs::create_directories(parent);
    fs::create_directory(tmp);
    write_hf_tensors(tmp, tensors, {{"format", "pt"}}, options.max_shard_bytes);
    // config.json last: a directory with a config is a complete one.
    write_text_file_atomically((fs::path(tmp) / kConfigFile).string(), config_text);
    publish(tmp, dir);
  } catch (const fs::filesystem_error& e) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw CheckpointError(c10::str(what, ": cannot write ", dir, ": ", e.what()));
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
}

}  // namespace tessera::runtime::hf
