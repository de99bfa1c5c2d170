#include "tessera/checkpoint/crc32c.h"

#include <array>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tessera::checkpoint {

namespace {

// Tables for slicing-by-8 over the reflected Castagnoli polynomial 0x82F63B78:
// eight table lookups per 8 input bytes instead of one per byte.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t;
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
};

const Tables& tables() {
  static const Tables kTables;
  return kTables;
}

uint32_t crc32c_software(uint32_t crc, const void* data, size_t size) {
  const auto& t = tables().t;
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (size >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);  // little-endian hosts only (x86-64, aarch64)
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return ~c;
}

#if defined(__x86_64__)
// SSE4.2's crc32 instruction computes this very polynomial, 8 bytes per
// instruction: several GB/s against the tables' 1-2, which matters once a
// checkpoint of gigabytes is checksummed (twice: per tensor and per file).
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const void* data,
                                                        size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  while (size >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    size -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (size-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool has_sse42() {
  static const bool kHas = __builtin_cpu_supports("sse4.2");
  return kHas;
}
#endif

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
#if defined(__x86_64__)
  if (has_sse42()) return crc32c_sse42(crc, data, size);
#endif
  return crc32c_software(crc, data, size);
}

namespace {

// Combining two checksums (zlib's crc32_combine, for this polynomial): appending
// len2 bytes to a message multiplies its CRC register by x^(8 len2) over GF(2),
// a linear map applied here as 32x32 bit matrices squared once per bit of len2.
uint32_t gf2_times(const uint32_t* matrix, uint32_t vec) {
  uint32_t sum = 0;
  for (int i = 0; vec != 0; ++i, vec >>= 1) {
    if (vec & 1) sum ^= matrix[i];
  }
  return sum;
}

void gf2_square(uint32_t* square, const uint32_t* matrix) {
  for (int n = 0; n < 32; ++n) square[n] = gf2_times(matrix, matrix[n]);
}

}  // namespace

uint32_t crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
  if (len2 == 0) return crc1;
  uint32_t even[32], odd[32];
  odd[0] = 0x82F63B78u;  // the operator for one zero bit
  for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
  gf2_square(even, odd);  // two zero bits
  gf2_square(odd, even);  // four zero bits
  // Apply len2 zero bytes to crc1, one bit of len2 at a time.
  do {
    gf2_square(even, odd);
    if (len2 & 1) crc1 = gf2_times(even, crc1);
    len2 >>= 1;
    if (len2 == 0) break;
    gf2_square(odd, even);
    if (len2 & 1) crc1 = gf2_times(odd, crc1);
    len2 >>= 1;
  } while (len2 != 0);
  return crc1 ^ crc2;
}

std::string crc32c_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", crc);
  return buf;
}

}  // namespace tessera::checkpoint
