// Test helper: an independent reader of TensorBoard event files, written from the
// public format and sharing no code with Tessera's writer: its own bitwise
// CRC-32C, its own TFRecord unframing and a hand-written protocol-buffer wire
// decoder for Event/Summary (field numbers of TensorFlow's event.proto and
// summary.proto). Every record's two CRCs are checked; any mismatch, truncation
// or malformed field throws std::runtime_error naming the record.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera::testing {

struct TfScalar {
  std::string tag;
  float value = 0;
  int64_t step = 0;
  double wall_time = 0;
};

struct TfEventFile {
  std::string file_version;  // from the first record
  std::vector<TfScalar> scalars;
  int records = 0;  // every record read, CRCs checked
};

// Bit by bit over the reflected Castagnoli polynomial: slow and obviously right.
inline uint32_t reference_crc32c(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

inline uint32_t reference_masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = reference_crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

namespace tfevents_detail {

// A cursor over protobuf wire bytes.
struct Wire {
  const uint8_t* p;
  const uint8_t* end;
  bool done() const { return p >= end; }
  void need(size_t n) const {
    if (static_cast<size_t>(end - p) < n) throw std::runtime_error("truncated protobuf field");
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("varint longer than 10 bytes");
  }
  template <typename T>
  T fixed() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  Wire bytes() {
    const uint64_t n = varint();
    need(n);
    Wire sub{p, p + n};
    p += n;
    return sub;
  }
  std::string str() {
    Wire b = bytes();
    return std::string(reinterpret_cast<const char*>(b.p), b.end - b.p);
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0:
        varint();
        break;
      case 1:
        fixed<uint64_t>();
        break;
      case 2:
        bytes();
        break;
      case 5:
        fixed<uint32_t>();
        break;
      default:
        throw std::runtime_error("unsupported wire type " + std::to_string(wire_type));
    }
  }
};

inline uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

// Summary.Value: tag = 1 (string), simple_value = 2 (float).
inline void read_value(Wire w, TfScalar base, std::vector<TfScalar>& out) {
  bool has_value = false;
  while (!w.done()) {
    const uint64_t key = w.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == 2) {
      base.tag = w.str();
    } else if (field == 2 && type == 5) {
      base.value = w.fixed<float>();
      has_value = true;
    } else {
      w.skip(type);
    }
  }
  if (has_value) out.push_back(base);
}

// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3, summary = 5.
inline void read_event(Wire w, TfEventFile& file) {
  TfScalar base;
  std::vector<Wire> summaries;
  while (!w.done()) {
    const uint64_t key = w.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == 1) {
      base.wall_time = w.fixed<double>();
    } else if (field == 2 && type == 0) {
      base.step = static_cast<int64_t>(w.varint());
    } else if (field == 3 && type == 2) {
      file.file_version = w.str();
    } else if (field == 5 && type == 2) {
      summaries.push_back(w.bytes());
    } else {
      w.skip(type);
    }
  }
  for (Wire s : summaries) {  // Summary: repeated Value value = 1
    while (!s.done()) {
      const uint64_t key = s.varint();
      if ((key >> 3) == 1 && (key & 7) == 2) {
        read_value(s.bytes(), base, file.scalars);
      } else {
        s.skip(static_cast<int>(key & 7));
      }
    }
  }
}

}  // namespace tfevents_detail

inline TfEventFile read_tfevents(const std::string& path) {
  using namespace tfevents_detail;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::string s((std::istreambuf_iterator<char>(in)), {});
  TfEventFile file;
  size_t at = 0;
  while (at < s.size()) {
    const std::string where = path + " record " + std::to_string(file.records);
    if (s.size() - at < 12) throw std::runtime_error(where + ": truncated header");
    const uint64_t length = le(s, at, 8);
    if (le(s, at + 8, 4) != reference_masked_crc32c(s.data() + at, 8)) {
      throw std::runtime_error(where + ": length CRC mismatch");
    }
    if (s.size() - at - 12 < length + 4) throw std::runtime_error(where + ": truncated payload");
    const char* payload = s.data() + at + 12;
    if (le(s, at + 12 + length, 4) != reference_masked_crc32c(payload, length)) {
      throw std::runtime_error(where + ": payload CRC mismatch");
    }
    const auto* p = reinterpret_cast<const uint8_t*>(payload);
    read_event(Wire{p, p + length}, file);
    ++file.records;
    at += 12 + length + 4;
  }
  return file;
}

}  // namespace tessera::testing
