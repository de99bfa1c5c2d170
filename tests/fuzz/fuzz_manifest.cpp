// Fuzz target: a checkpoint's manifest.json, read from disk on resume (possibly
// corrupted, possibly written by another version). from_json must accept or throw
// CheckpointError. A random mutation almost never keeps the manifest's own CRC-32C
// right, which would stop every input at the CRC check: so each input is also
// parsed a second time with its CRC recomputed, to reach the field checks behind
// it. An accepted manifest must survive to_json -> from_json unchanged.
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_targets.h"
#include "tessera/checkpoint/checkpoint_manifest.h"
#include "tessera/checkpoint/crc32c.h"
#include "tessera/core/error.h"

namespace tessera::fuzz {
namespace {

using checkpoint::CheckpointManifest;

int parse_manifest(const std::string& text) {
  CheckpointManifest m;
  try {
    m = CheckpointManifest::from_json(text, "fuzz/manifest.json");
  } catch (const CheckpointError&) {
    return 0;
  }
  expect(m.world_size >= 1 && m.rank_metadata.size() == static_cast<size_t>(m.world_size),
         "accepted a manifest whose rank_metadata does not match world_size");
  for (int r = 0; r < m.world_size && r < 64; ++r) (void)m.rank_file(r);
  (void)m.replicated_file();
  // What we write we must read back (a CheckpointError here is a finding too).
  const std::string written = m.to_json();
  const CheckpointManifest again = CheckpointManifest::from_json(written, "fuzz/rewritten.json");
  expect(again.to_json() == written, "manifest changed in a to_json/from_json round trip");
  return 1;
}

}  // namespace

int fuzz_manifest(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const int accepted = parse_manifest(text);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    j.erase("manifest_crc32c");
    const std::string canonical = j.dump();
    j["manifest_crc32c"] =
        checkpoint::crc32c_hex(checkpoint::crc32c(canonical.data(), canonical.size()));
    parse_manifest(j.dump());
  }
  return accepted;
}

}  // namespace tessera::fuzz

#ifdef TESSERA_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::fuzz_manifest(data, size);
  return 0;
}
#endif
