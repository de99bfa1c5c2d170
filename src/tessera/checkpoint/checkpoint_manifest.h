// CheckpointManifest: the table of contents of one checkpoint step directory,
// `manifest.json`. Its presence is what makes a checkpoint complete: it is written
// last, after every file it lists is on disk (see checkpoint_writer.h).
//
//   {"format": "tessera-checkpoint", "format_version": 1, "step": 100,
//    "world_size": 4, "created_unix": 1733150000,
//    "metadata": {...},                    // the caller's job-level JSON
//    "rank_metadata": [{...}, ...],        // one caller JSON per rank
//    "files": [{"path": "replicated.tsr", "rank": 0, "kind": "replicated",
//               "size": 1234, "crc32c": "89abcdef",
//               "tensors": [{"name": "wte.weight", "dtype": "Float",
//                            "shape": [256, 64], "offset": 4096, "nbytes": 65536,
//                            "crc32c": "0a1b2c3d"}]},
//              {"path": "rank_00001.tsr", "rank": 1, "kind": "rank", "tensors": [
//                 {"name": "model.h.0.mlp.c_fc.weight", "shape": [12288],
//                  "full_shape": [256, 64], "flat_offset": 4096, ...}]}]}
//
// A tensor entry is either a whole tensor or, with "full_shape", one contiguous
// piece of a sharded tensor (ZeRO): the elements [flat_offset, flat_offset + n) of
// the tensor of shape full_shape flattened in row-major order, stored 1-D with
// shape [n]. sharded_tensors.h reassembles whole tensors, or any range of one,
// from the pieces of every rank's file, so a checkpoint loads at any world size.
//
// Reading is strict, because a manifest comes from disk and may be corrupted:
// integers must be integers in range (no 1.5, no -1 for a size), lists must be
// lists, and anything else is a CheckpointError naming the manifest; no other
// exception escapes from_json (tests/fuzz fuzzes it).
//
// A plain value; not thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::checkpoint {

constexpr int kManifestFormatVersion = 1;
constexpr const char* kManifestName = "manifest.json";
constexpr const char* kLatestName = "latest";

struct TensorEntry {
  std::string name;
  std::string dtype;  // c10 ScalarType name: "Float", "Long", "BFloat16", ...
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // byte offset of the data in its file
  uint64_t nbytes = 0;
  // CRC-32C (hex) of the tensor's own bytes, so one tensor can be read and checked
  // without reading its whole file; empty in files that predate it.
  std::string crc32c;
  // A piece of a sharded tensor (see above): the whole tensor's shape and where
  // this piece starts in its flattened elements. shape is then [n].
  bool is_piece = false;
  std::vector<int64_t> full_shape;
  int64_t flat_offset = 0;

  bool operator==(const TensorEntry& o) const {
    return name == o.name && dtype == o.dtype && shape == o.shape && offset == o.offset &&
           nbytes == o.nbytes && crc32c == o.crc32c && is_piece == o.is_piece &&
           full_shape == o.full_shape && flat_offset == o.flat_offset;
  }
};

enum class FileKind { kReplicated, kRank };

struct FileEntry {
  std::string path;  // relative to the step directory
  int rank = 0;      // the rank that wrote it
  FileKind kind = FileKind::kRank;
  uint64_t size = 0;   // bytes
  std::string crc32c;  // hex, of the whole file
  std::vector<TensorEntry> tensors;
};

struct CheckpointManifest {
  int format_version = kManifestFormatVersion;
  int64_t step = 0;
  int world_size = 1;
  int64_t created_unix = 0;
  nlohmann::json metadata = nlohmann::json::object();
  std::vector<nlohmann::json> rank_metadata;  // world_size entries
  std::vector<FileEntry> files;

  std::string to_json() const;
  // CheckpointError naming `source` (the manifest path) and the problem when the
  // text is not valid JSON, has another format or version, or misses fields.
  static CheckpointManifest from_json(const std::string& text, const std::string& source);

  // The replicated file, or nullptr if the checkpoint has none.
  const FileEntry* replicated_file() const;
  // Rank r's own file, or nullptr if it wrote none.
  const FileEntry* rank_file(int rank) const;
};

nlohmann::json to_json(const FileEntry& file);
// CheckpointError naming `source` when a field is missing, has the wrong type or
// is out of range (a negative rank, size or dimension; a path with a '/').
FileEntry file_entry_from_json(const nlohmann::json& j, const std::string& source);
// One tensor's entry, as the manifest and a .tsr index both write it;
// CheckpointError naming `source` as above. Does not check the shape against the
// byte count or the file (see parse_tensor_index). A piece must be 1-D and lie
// inside its full shape.
TensorEntry tensor_entry_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace tessera::checkpoint
