#include "tessera/runtime/monitor/tfrecord.h"

#include "tessera/checkpoint/crc32c.h"

namespace tessera::runtime {
namespace {

constexpr uint32_t kMaskDelta = 0xa282ead8u;

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = checkpoint::crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

std::string tfrecord_frame(const std::string& payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le(out, payload.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out += payload;
  put_le(out, masked_crc32c(payload.data(), payload.size()), 4);
  return out;
}

}  // namespace tessera::runtime
