// TFRecord framing, the container of TensorBoard event files: each record is
//
//   uint64 length | uint32 masked_crc32c(length) | payload | uint32 masked_crc32c(payload)
//
// all little-endian. The CRC is CRC-32C (Castagnoli), rotated and offset
// ("masked") because a CRC over data that itself holds CRCs is weak. Pure
// functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera::runtime {

// ((crc >> 15) | (crc << 17)) + 0xa282ead8 of the CRC-32C of data[0, size).
uint32_t masked_crc32c(const void* data, size_t size);

// The framed record holding `payload` (16 bytes longer).
std::string tfrecord_frame(const std::string& payload);

}  // namespace tessera::runtime
