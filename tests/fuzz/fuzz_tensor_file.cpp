// Fuzz target: a .tsr tensor file (a checkpoint shard), read whole from disk.
// parse_tensor_index must accept or throw CheckpointError, never read outside the
// buffer, and never accept an entry whose tensor would not fit in the file;
// tensor_from_bytes must then rebuild each accepted tensor with exactly its bytes.
// It is also fed the index's raw entries, unchecked (as a caller holding entries
// from elsewhere would), and must refuse the bad ones before allocating.
#include <ATen/ATen.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_targets.h"
#include "tessera/checkpoint/tensor_file.h"
#include "tessera/core/error.h"

namespace tessera::fuzz {
namespace {

constexpr const char* kSource = "fuzz/rank_00000.tsr";

void check_tensor(const std::string& bytes, const checkpoint::TensorEntry& e, const at::Tensor& t) {
  expect(t.sizes().vec() == e.shape, "tensor '" + e.name + "' has another shape than its entry");
  expect(static_cast<uint64_t>(t.nbytes()) == e.nbytes,
         "tensor '" + e.name + "' has another byte count than its entry");
  expect(e.nbytes == 0 || std::memcmp(t.data_ptr(), bytes.data() + e.offset, e.nbytes) == 0,
         "tensor '" + e.name + "' does not hold its bytes");
}

// The index's entries as written, through tensor_from_bytes without parse_tensor_index.
void unchecked_entries(const std::string& bytes) {
  if (bytes.size() < 16) return;
  uint64_t len = 0;
  std::memcpy(&len, bytes.data() + 8, 8);
  if (len > bytes.size() - 16) return;
  auto j = nlohmann::json::parse(bytes.begin() + 16, bytes.begin() + 16 + static_cast<long>(len),
                                 nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("tensors") || !j["tensors"].is_array()) return;
  for (const auto& t : j["tensors"]) {
    try {
      const auto e = checkpoint::tensor_entry_from_json(t, kSource);
      check_tensor(bytes, e, checkpoint::tensor_from_bytes(bytes, e, kSource));
    } catch (const CheckpointError&) {
    }
  }
}

}  // namespace

int fuzz_tensor_file(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  unchecked_entries(bytes);
  std::vector<checkpoint::TensorEntry> entries;
  try {
    entries = checkpoint::parse_tensor_index(bytes, kSource);
  } catch (const CheckpointError&) {
    return 0;
  }
  for (const auto& e : entries) {
    expect(e.offset <= size && e.nbytes <= size - e.offset,
           "accepted tensor '" + e.name + "' outside the file");
    // An accepted entry must load: any exception here is a finding.
    check_tensor(bytes, e, checkpoint::tensor_from_bytes(bytes, e, kSource));
  }
  return 1;
}

}  // namespace tessera::fuzz

#ifdef TESSERA_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::fuzz_tensor_file(data, size);
  return 0;
}
#endif
