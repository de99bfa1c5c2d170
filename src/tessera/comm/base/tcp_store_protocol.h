// The TcpStore wire protocol (private to comm/base).
//
// Every message is a frame: a 4-byte big-endian payload length, then the payload.
// Payloads are built from three field types: u8, i64 (big-endian) and blobs (a
// 4-byte big-endian length, then the bytes; keys and values are blobs).
//
//   handshake  client -> server: u32 kMagic, u32 kVersion, blob token
//              server -> client: u8 status (kOk or kError), blob message
//   request    u8 Op, then the op's fields (see Op)
//   response   u8 Status, then: kOk -> the op's result; kTimeout -> i64 count and
//              that many blobs (the keys still missing); kError -> blob message
//
// A client sends one request and waits for its response before the next one
// (the client holds a mutex around each round trip), so there is no request id.
//
// The server decodes what peers send with decode_handshake() and decode_request():
// pure functions over one payload, strict (every field present, no trailing
// bytes), that throw StoreError on anything malformed and never read outside the
// payload or allocate more than it could describe. tests/fuzz fuzzes them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/comm/base/store.h"

namespace tessera::comm::proto {

constexpr uint32_t kMagic = 0x54535354;  // "TSST"
constexpr uint32_t kVersion = 1;
// Frames larger than this are a protocol error (garbage or a foreign client), so
// one store value is at most ~64 MiB. The server buffers at most one frame per
// client, so this also bounds what one client can make the server hold.
constexpr uint32_t kMaxFrame = 64u << 20;
// Before the handshake, a peer may send only a small frame.
constexpr uint32_t kMaxHandshakeFrame = 64 * 1024;

enum class Op : uint8_t {
  kSet = 1,         // blob key, blob value                    -> (nothing)
  kGet = 2,         // blob key, i64 timeout_ms                -> blob value | timeout
  kAdd = 3,         // blob key, i64 delta                     -> i64 new value | error
  kCompareSet = 4,  // blob key, blob expected, blob desired   -> blob value
  kDelete = 5,      // blob key                                -> u8 existed
  kCheck = 6,       // i64 n, n blobs                          -> u8 all present
  kWait = 7,        // i64 n, n blobs, i64 timeout_ms          -> (nothing) | timeout
  kNumKeys = 8,     //                                         -> i64 count
};

enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// Appends fields to a payload.
class Writer {
 public:
  Writer& u8(uint8_t v) {
    buf_.push_back(v);
    return *this;
  }
  Writer& u32(uint32_t v);
  Writer& i64(int64_t v);
  Writer& blob(const void* data, size_t size);
  Writer& blob(const std::string& s) { return blob(s.data(), s.size()); }
  Writer& blob(const Bytes& b) { return blob(b.data(), b.size()); }
  Writer& strings(const std::vector<std::string>& v);
  // The payload with its length prefix, ready to send.
  Bytes frame() const;

 private:
  Bytes buf_;
};

// Reads fields from a payload; a short or malformed payload throws StoreError
// (the peer speaks another protocol or the stream is corrupt).
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  explicit Reader(const Bytes& b) : Reader(b.data(), b.size()) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  Bytes bytes();
  std::string str();
  std::vector<std::string> strings();
  bool done() const { return p_ == end_; }

 private:
  void need(size_t n);
  const uint8_t* p_;
  const uint8_t* end_;
};

// Decodes a big-endian frame length from 4 bytes.
uint32_t decode_length(const uint8_t* p);

// A client's first frame. version and token are read only when magic is ours,
// the token only when the version is too (another version may lay it out
// differently); the server refuses the client unless all three match.
struct Handshake {
  uint32_t magic = 0;
  uint32_t version = 0;
  std::string token;
};
// StoreError if the payload is short, or has trailing bytes after a kVersion token.
Handshake decode_handshake(const uint8_t* data, size_t size);

// One decoded request; the fields its op does not carry stay empty (see Op).
struct Request {
  Op op = Op::kNumKeys;
  std::string key;                // set, get, add, compare_set, delete
  Bytes value;                    // set
  Bytes expected, desired;        // compare_set
  int64_t delta = 0;              // add
  int64_t timeout_ms = 0;         // get, wait (as sent: may be negative or huge)
  std::vector<std::string> keys;  // check, wait
};
// StoreError naming the problem if the payload is empty, has an unknown op, is
// short, or has bytes after the op's last field.
Request decode_request(const uint8_t* data, size_t size);
inline Request decode_request(const Bytes& payload) {
  return decode_request(payload.data(), payload.size());
}

}  // namespace tessera::comm::proto
