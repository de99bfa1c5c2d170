#include "tessera/checkpoint/checkpoint_manifest.h"

#include <climits>
#include <cstdint>

#include "tessera/checkpoint/crc32c.h"
#include "tessera/core/check.h"

namespace tessera::checkpoint {

using nlohmann::json;

namespace {
constexpr const char* kFormatName = "tessera-checkpoint";

json tensor_to_json(const TensorEntry& t) {
  json j{{"name", t.name},
         {"dtype", t.dtype},
         {"shape", t.shape},
         {"offset", t.offset},
         {"nbytes", t.nbytes}};
  if (!t.crc32c.empty()) j["crc32c"] = t.crc32c;
  if (t.is_piece) {
    j["full_shape"] = t.full_shape;
    j["flat_offset"] = t.flat_offset;
  }
  return j;
}

// v as an integer in [lo, hi]. nlohmann's get<int>() would truncate 1.5, wrap -1
// into a huge size, and convert 1e300 with undefined behaviour: refuse them all.
int64_t integer_in(const json& v, int64_t lo, int64_t hi, const char* what,
                   const std::string& source) {
  bool ok = false;
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    ok = u <= static_cast<uint64_t>(hi);
    x = ok ? static_cast<int64_t>(u) : 0;
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
    ok = x >= lo && x <= hi;
  }
  TS_CHECK_T(CheckpointError, ok, source, ": '", what, "' must be an integer in [", lo, ", ", hi,
             "], got ", v.dump());
  return x;
}

int64_t integer_field(const json& j, const char* key, int64_t lo, int64_t hi,
                      const std::string& source) {
  return integer_in(j.at(key), lo, hi, key, source);
}

// j[key] when it is an array; CheckpointError otherwise (iterating an object or a
// number would silently read something else).
const json& array_field(const json& j, const char* key, const std::string& source) {
  const json& v = j.at(key);
  TS_CHECK_T(CheckpointError, v.is_array(), source, ": '", key, "' must be a list, got ",
             v.type_name());
  return v;
}
}  // namespace

TensorEntry tensor_entry_from_json(const json& j, const std::string& source) {
  try {
    TS_CHECK_T(CheckpointError, j.is_object(), source, ": a tensor entry must be an object");
    TensorEntry t;
    t.name = j.at("name").get<std::string>();
    t.dtype = j.at("dtype").get<std::string>();
    for (const auto& d : array_field(j, "shape", source)) {
      t.shape.push_back(integer_in(d, 0, INT64_MAX, "shape", source));
    }
    t.offset = static_cast<uint64_t>(integer_field(j, "offset", 0, INT64_MAX, source));
    t.nbytes = static_cast<uint64_t>(integer_field(j, "nbytes", 0, INT64_MAX, source));
    if (j.contains("crc32c")) t.crc32c = j.at("crc32c").get<std::string>();
    if (j.contains("full_shape")) {
      t.is_piece = true;
      int64_t full = 1;
      bool overflow = false;
      for (const auto& d : array_field(j, "full_shape", source)) {
        t.full_shape.push_back(integer_in(d, 0, INT64_MAX, "full_shape", source));
        overflow = overflow || __builtin_mul_overflow(full, t.full_shape.back(), &full);
      }
      t.flat_offset = integer_field(j, "flat_offset", 0, INT64_MAX, source);
      TS_CHECK_T(CheckpointError, !overflow && t.shape.size() == 1 && t.flat_offset <= full &&
                                      t.shape[0] <= full - t.flat_offset,
                 source, ": piece of tensor '", t.name,
                 "' must be 1-D and lie inside its full_shape");
    }
    return t;
  } catch (const json::exception& e) {
    TS_THROW(CheckpointError, source, ": malformed tensor entry: ", e.what());
  }
}

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
    TS_CHECK_T(CheckpointError, j.is_object(), source, ": a file entry must be an object");
    FileEntry f;
    f.path = j.at("path").get<std::string>();
    f.rank = static_cast<int>(integer_field(j, "rank", 0, INT_MAX, source));
    const std::string kind = j.at("kind").get<std::string>();
    TS_CHECK_T(CheckpointError, kind == "replicated" || kind == "rank", source, ": file ", f.path,
               " has unknown kind '", kind, "'");
    f.kind = kind == "replicated" ? FileKind::kReplicated : FileKind::kRank;
    f.size = static_cast<uint64_t>(integer_field(j, "size", 0, INT64_MAX, source));
    f.crc32c = j.at("crc32c").get<std::string>();
    // Paths are plain names inside the step directory; reject anything that could
    // point elsewhere.
    TS_CHECK_T(
        CheckpointError,
        !f.path.empty() && f.path.find('/') == std::string::npos && f.path != "." && f.path != "..",
        source, ": file path '", f.path, "' is not a plain file name");
    for (const auto& t : array_field(j, "tensors", source)) {
      f.tensors.push_back(tensor_entry_from_json(t, source));
    }
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
    m.format_version = static_cast<int>(integer_field(j, "format_version", 0, INT_MAX, source));
    TS_CHECK_T(CheckpointError, m.format_version == kManifestFormatVersion, "manifest ", source,
               " has format version ", m.format_version, "; this build reads version ",
               kManifestFormatVersion, " (upgrade Tessera)");
    m.step = integer_field(j, "step", INT64_MIN, INT64_MAX, source);
    m.world_size = static_cast<int>(integer_field(j, "world_size", 1, INT_MAX, source));
    if (j.contains("created_unix")) {
      m.created_unix = integer_field(j, "created_unix", INT64_MIN, INT64_MAX, source);
    }
    m.metadata = j.at("metadata");
    for (const auto& r : array_field(j, "rank_metadata", source)) m.rank_metadata.push_back(r);
    for (const auto& f : array_field(j, "files", source)) {
      m.files.push_back(file_entry_from_json(f, source));
    }
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
