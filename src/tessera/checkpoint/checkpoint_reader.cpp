#include "tessera/checkpoint/checkpoint_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "tessera/checkpoint/crc32c.h"
#include "tessera/checkpoint/tensor_file.h"
#include "tessera/core/check.h"
#include "tessera/core/logging.h"

namespace tessera::checkpoint {

namespace fs = std::filesystem;

namespace {

// Checks one file's presence, size and checksum against its manifest entry and
// returns its bytes.
// "tensors a, b, c and 12 more": what a missing or damaged file held.
std::string tensors_held(const FileEntry& f) {
  std::string out;
  const size_t shown = std::min<size_t>(f.tensors.size(), 3);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", '" : "'") + f.tensors[i].name + "'";
  if (f.tensors.size() > shown) out += " and " + std::to_string(f.tensors.size() - shown) + " more";
  return out.empty() ? "no tensors" : "tensors " + out;
}

// Checks that the file exists with the size the manifest records.
void check_present(const std::string& step_dir, const FileEntry& f) {
  const std::string path = step_dir + "/" + f.path;
  struct stat st;
  TS_CHECK_T(CheckpointError, ::stat(path.c_str(), &st) == 0, "checkpoint file ", path,
             " listed in the manifest is missing (deleted, or never copied?); it holds ",
             tensors_held(f));
  TS_CHECK_T(CheckpointError, static_cast<uint64_t>(st.st_size) == f.size, "checkpoint file ", path,
             " has ", st.st_size, " bytes but the manifest records ", f.size,
             " (truncated or overwritten); it holds ", tensors_held(f));
}

std::string read_verified(const std::string& step_dir, const FileEntry& f) {
  const std::string path = step_dir + "/" + f.path;
  check_present(step_dir, f);
  std::string bytes = read_file_bytes(path);
  TS_CHECK_T(CheckpointError, bytes.size() == f.size, "checkpoint file ", path, " read ",
             bytes.size(), " bytes but the manifest records ", f.size, " (truncated?)");
  const std::string crc = crc32c_hex(crc32c(bytes.data(), bytes.size()));
  TS_CHECK_T(CheckpointError, crc == f.crc32c, "checkpoint file ", path, " is corrupted: CRC-32C ",
             crc, " does not match ", f.crc32c, " recorded in the manifest");
  return bytes;
}

void check_index_matches(const std::string& path, const std::vector<TensorEntry>& in_file,
                         const std::vector<TensorEntry>& in_manifest) {
  const bool same = in_file == in_manifest;
  TS_CHECK_T(CheckpointError, same, "checkpoint file ", path,
             " holds different tensors than its manifest lists (mixed up with another step?)");
}

}  // namespace

CheckpointReader CheckpointReader::open(const std::string& step_dir, Verify verify) {
  CheckpointReader r;
  r.step_dir_ = step_dir;
  const std::string mpath = step_dir + "/" + kManifestName;
  std::error_code ec;
  TS_CHECK_T(CheckpointError, fs::is_directory(step_dir, ec), "checkpoint directory ", step_dir,
             " does not exist");
  TS_CHECK_T(CheckpointError, fs::exists(mpath, ec), "checkpoint ", step_dir,
             " is incomplete: ", mpath,
             " is missing (the save did not finish); load an earlier step, e.g. via "
             "latest_checkpoint()");
  r.manifest_ = CheckpointManifest::from_json(read_file_bytes(mpath), mpath);
  for (const auto& f : r.manifest_.files) {
    const std::string path = step_dir + "/" + f.path;
    // A file whose tensors carry no checksum of their own (an older checkpoint) is
    // checked whole even in kIndex mode.
    const bool per_tensor = std::all_of(f.tensors.begin(), f.tensors.end(),
                                        [](const TensorEntry& t) { return !t.crc32c.empty(); });
    if (verify == Verify::kIndex && per_tensor) {
      check_present(step_dir, f);
      check_index_matches(path, read_tensor_index(path, f.size), f.tensors);
    } else {
      std::string bytes = read_verified(step_dir, f);
      check_index_matches(path, parse_tensor_index(bytes, path), f.tensors);
    }
  }
  return r;
}

at::Tensor CheckpointReader::read_tensor(const FileEntry& file, const TensorEntry& entry) const {
  if (entry.crc32c.empty()) {
    for (auto& [name, t] : load_file(file)) {
      if (name == entry.name) return t;
    }
    TS_THROW(CheckpointError, "checkpoint file ", step_dir_, "/", file.path, " has no tensor '",
             entry.name, "'");
  }
  return checkpoint::read_tensor(step_dir_ + "/" + file.path, entry);
}

const nlohmann::json& CheckpointReader::rank_metadata(int rank) const {
  TS_CHECK_T(CheckpointError, rank >= 0 && rank < manifest_.world_size, "checkpoint ", step_dir_,
             " was saved by ", manifest_.world_size, " ranks; it has no state for rank ", rank);
  return manifest_.rank_metadata[static_cast<size_t>(rank)];
}

NamedTensors CheckpointReader::load_file(const FileEntry& file) const {
  // Re-verified: the bytes we hand out are the bytes we checked.
  const std::string path = step_dir_ + "/" + file.path;
  std::string bytes = read_verified(step_dir_, file);
  auto entries = parse_tensor_index(bytes, path);
  check_index_matches(path, entries, file.tensors);
  NamedTensors out;
  for (const auto& e : entries) out.emplace_back(e.name, tensor_from_bytes(bytes, e, path));
  return out;
}

NamedTensors CheckpointReader::replicated() const {
  const FileEntry* f = manifest_.replicated_file();
  return f ? load_file(*f) : NamedTensors{};
}

NamedTensors CheckpointReader::per_rank(int rank) const {
  TS_CHECK_T(CheckpointError, rank >= 0 && rank < manifest_.world_size, "checkpoint ", step_dir_,
             " was saved by ", manifest_.world_size, " ranks; it has no state for rank ", rank,
             " (resume with the same world size)");
  const FileEntry* f = manifest_.rank_file(rank);
  return f ? load_file(*f) : NamedTensors{};
}

std::vector<int64_t> list_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) != 0 || !entry.is_directory()) continue;
    const std::string digits = name.substr(5);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!fs::exists(entry.path() / kManifestName)) continue;
    steps.push_back(std::stoll(digits));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string resolve_step_dir(const std::string& dir, const std::string& hint) {
  if (fs::exists(fs::path(dir) / kManifestName)) return dir;
  TS_CHECK_T(CheckpointError, fs::is_directory(dir), "checkpoint directory '", dir,
             "' does not exist");
  auto latest = latest_checkpoint(dir);
  TS_CHECK_T(CheckpointError, latest.has_value(), "no complete checkpoint in '", dir,
             "' (no step directory with a valid manifest)", hint);
  return *latest;
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto verifies = [](const std::string& sdir) {
    try {
      CheckpointReader::open(sdir);
      return true;
    } catch (const CheckpointError& e) {
      TS_LOG(WARN) << "skipping checkpoint " << sdir << ": " << e.what();
      return false;
    }
  };
  std::error_code ec;
  const std::string pointer = dir + "/" + kLatestName;
  if (fs::exists(pointer, ec)) {
    try {
      std::string name = read_file_bytes(pointer);
      name.erase(name.find_last_not_of(" \n\r\t") + 1);
      if (!name.empty() && name.find('/') == std::string::npos && verifies(dir + "/" + name)) {
        return dir + "/" + name;
      }
    } catch (const CheckpointError& e) {
      TS_LOG(WARN) << "cannot read " << pointer << ": " << e.what();
    }
  }
  std::vector<int64_t> steps = list_steps(dir);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (verifies(step_dir(dir, *it))) return step_dir(dir, *it);
  }
  return std::nullopt;
}

const at::Tensor& find_tensor(const NamedTensors& tensors, const std::string& name,
                              const std::string& hint) {
  for (const auto& t : tensors) {
    if (t.first == name) return t.second;
  }
  TS_THROW(CheckpointError, "checkpoint has no tensor named '", name, "'", hint);
}

}  // namespace tessera::checkpoint
