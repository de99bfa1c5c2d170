// CRC-32C (Castagnoli), the checksum of checkpoint files: detects truncation and
// flipped bits, not tampering. SSE4.2's crc32 instruction where the CPU has it
// (several GB/s per core), else software slicing-by-8 (~1-2 GB/s); both give
// the same value. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera::checkpoint {

// Extends crc (0 for a fresh checksum) over data[0, size).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);
inline uint32_t crc32c(const void* data, size_t size) { return crc32c_extend(0, data, size); }

// The checksum of A followed by B from crc1 = crc32c(A), crc2 = crc32c(B) and
// B's length, without reading either: a file's checksum from its tensors'.
uint32_t crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

// Eight lowercase hex digits, the form the manifest stores.
std::string crc32c_hex(uint32_t crc);

}  // namespace tessera::checkpoint
