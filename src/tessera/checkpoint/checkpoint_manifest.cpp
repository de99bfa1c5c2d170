#include "tessera/checkpoint/checkpoint_manifest.h"

#include "tessera/checkpoint/crc32c.h"
#include "tessera/core/check.h"

namespace tessera::checkpoint {

using nlohmann::json;

namespace {
constexpr const char* kFormatName = "tessera-checkpoint";

json tensor_to_json(const TensorEntry& t) {
  return json{{"name", t.name},
              {"dtype", t.dtype},
              {"shape", t.shape},
              {"offset", t.offset},
              {"nbytes", t.nbytes}};
}

TensorEntry tensor_from_json(const json& j) {
  TensorEntry t;
  t.name = j.at("name").get<std::string>();
  t.dtype = j.at("dtype").get<std::string>();
  t.shape = j.at("shape").get<std::vector<int64_t>>();
  t.offset = j.at("offset").get<uint64_t>();
  t.nbytes = j.at("nbytes").get<uint64_t>();
  return t;
}
}  // namespace

json to_json(const FileEntry& f) {
  json tensors = json::array();
  for (const auto& t : f.tensors) tensors.push_back(tensor_to_json(t));
  return json{{"path", f.path},
              {"rank", f.rank},
              {"kind", f.kind == FileKind::kReplicated ? "replicated" : "rank"},
              {"size", f.size},
              {"crc32c", f.crc32c},
              {"tensors", tensors}};
}

FileEntry file_entry_from_json(const json& j, const std::string& source) {
  try {
    FileEntry f;
    f.path = j.at("path").get<std::string>();
    f.rank = j.at("rank").get<int>();
    const std::string kind = j.at("kind").get<std::string>();
    TS_CHECK_T(CheckpointError, kind == "replicated" || kind == "rank", source, ": file ", f.path,
               " has unknown kind '", kind, "'");
    f.kind = kind == "replicated" ? FileKind::kReplicated : FileKind::kRank;
    f.size = j.at("size").get<uint64_t>();
    f.crc32c = j.at("crc32c").get<std::string>();
    // Paths are plain names inside the step directory; reject anything that could
    // point elsewhere.
    TS_CHECK_T(
        CheckpointError,
        !f.path.empty() && f.path.find('/') == std::string::npos && f.path != "." && f.path != "..",
        source, ": file path '", f.path, "' is not a plain file name");
    for (const auto& t : j.at("tensors")) f.tensors.push_back(tensor_from_json(t));
    return f;
  } catch (const json::exception& e) {
    TS_THROW(CheckpointError, source, ": malformed file entry: ", e.what());
  }
}

std::string CheckpointManifest::to_json() const {
  json files_json = json::array();
  for (const auto& f : files) files_json.push_back(checkpoint::to_json(f));
  json j{{"format", kFormatName},
         {"format_version", format_version},
         {"step", step},
         {"world_size", world_size},
         {"created_unix", created_unix},
         {"metadata", metadata},
         {"rank_metadata", rank_metadata},
         {"files", files_json}};
  // The manifest checks itself: a CRC-32C of its compact form without this field
  // (object keys are sorted, so the form is canonical).
  const std::string canonical = j.dump();
  j["manifest_crc32c"] = crc32c_hex(crc32c(canonical.data(), canonical.size()));
  return j.dump(1);
}

CheckpointManifest CheckpointManifest::from_json(const std::string& text,
                                                 const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    TS_THROW(CheckpointError, "manifest ", source, " is not valid JSON (corrupted?): ", e.what());
  }
  CheckpointManifest m;
  try {
    TS_CHECK_T(CheckpointError, j.is_object() && j.value("format", "") == kFormatName, "manifest ",
               source, " is not a Tessera checkpoint manifest");
    const std::string recorded = j.at("manifest_crc32c").get<std::string>();
    j.erase("manifest_crc32c");
    const std::string canonical = j.dump();
    const std::string actual = crc32c_hex(crc32c(canonical.data(), canonical.size()));
    TS_CHECK_T(CheckpointError, actual == recorded, "manifest ", source,
               " is corrupted: its CRC-32C ", actual, " does not match the recorded ", recorded);
    m.format_version = j.at("format_version").get<int>();
    TS_CHECK_T(CheckpointError, m.format_version == kManifestFormatVersion, "manifest ", source,
               " has format version ", m.format_version, "; this build reads version ",
               kManifestFormatVersion, " (upgrade Tessera)");
    m.step = j.at("step").get<int64_t>();
    m.world_size = j.at("world_size").get<int>();
    m.created_unix = j.value("created_unix", int64_t{0});
    m.metadata = j.at("metadata");
    for (const auto& r : j.at("rank_metadata")) m.rank_metadata.push_back(r);
    for (const auto& f : j.at("files")) m.files.push_back(file_entry_from_json(f, source));
  } catch (const json::exception& e) {
    TS_THROW(CheckpointError, "manifest ", source, " is missing a field: ", e.what());
  }
  TS_CHECK_T(CheckpointError,
             m.world_size >= 1 && static_cast<int>(m.rank_metadata.size()) == m.world_size,
             "manifest ", source, " lists ", m.rank_metadata.size(),
             " rank_metadata entries for world size ", m.world_size);
  return m;
}

const FileEntry* CheckpointManifest::replicated_file() const {
  for (const auto& f : files) {
    if (f.kind == FileKind::kReplicated) return &f;
  }
  return nullptr;
}

const FileEntry* CheckpointManifest::rank_file(int rank) const {
  for (const auto& f : files) {
    if (f.kind == FileKind::kRank && f.rank == rank) return &f;
  }
  return nullptr;
}

}  // namespace tessera::checkpoint
