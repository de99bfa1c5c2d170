#include "tessera/comm/base/tcp_store_protocol.h"

#include <cstring>

#include "tessera/core/check.h"

namespace tessera::comm::proto {

Writer& Writer::u32(uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) buf_.push_back(static_cast<uint8_t>(v >> shift));
  return *this;
}

Writer& Writer::i64(int64_t v) {
  uint64_t u = static_cast<uint64_t>(v);
  for (int shift = 56; shift >= 0; shift -= 8) buf_.push_back(static_cast<uint8_t>(u >> shift));
  return *this;
}

Writer& Writer::blob(const void* data, size_t size) {
  TS_CHECK_T(StoreError, size < kMaxFrame, "store value of ", size, " bytes is too large (limit ",
             kMaxFrame >> 20, " MiB); the store is for small rendezvous data");
  u32(static_cast<uint32_t>(size));
  const uint8_t* p = static_cast<const uint8_t*>(data);
  buf_.insert(buf_.end(), p, p + size);
  return *this;
}

Writer& Writer::strings(const std::vector<std::string>& v) {
  i64(static_cast<int64_t>(v.size()));
  for (const auto& s : v) blob(s);
  return *this;
}

Bytes Writer::frame() const {
  TS_CHECK_T(StoreError, buf_.size() < kMaxFrame, "store message of ", buf_.size(),
             " bytes is too large (limit ", kMaxFrame >> 20, " MiB)");
  Writer w;
  w.u32(static_cast<uint32_t>(buf_.size()));
  Bytes out = std::move(w.buf_);
  out.insert(out.end(), buf_.begin(), buf_.end());
  return out;
}

uint32_t decode_length(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void Reader::need(size_t n) {
  TS_CHECK_T(StoreError, static_cast<size_t>(end_ - p_) >= n, "malformed store message (", n,
             " more bytes expected); the peer is not a "
             "Tessera store of the same version");
}

uint8_t Reader::u8() {
  need(1);
  return *p_++;
}

uint32_t Reader::u32() {
  need(4);
  uint32_t v = decode_length(p_);
  p_ += 4;
  return v;
}

int64_t Reader::i64() {
  need(8);
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u = (u << 8) | p_[i];
  p_ += 8;
  return static_cast<int64_t>(u);
}

Bytes Reader::bytes() {
  uint32_t n = u32();
  need(n);
  Bytes b(p_, p_ + n);
  p_ += n;
  return b;
}

std::string Reader::str() {
  uint32_t n = u32();
  need(n);
  std::string s(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return s;
}

std::vector<std::string> Reader::strings() {
  int64_t n = i64();
  // Each key needs at least its 4-byte length: bounds n before reserving.
  TS_CHECK_T(StoreError, n >= 0 && n <= (end_ - p_) / 4, "malformed store message (", n,
             " keys announced)");
  std::vector<std::string> v;
  v.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v.push_back(str());
  return v;
}

Handshake decode_handshake(const uint8_t* data, size_t size) {
  Reader r(data, size);
  Handshake h;
  h.magic = r.u32();
  if (h.magic != kMagic) return h;
  h.version = r.u32();
  if (h.version != kVersion) return h;
  h.token = r.str();
  TS_CHECK_T(StoreError, r.done(), "malformed store handshake (bytes after the token)");
  return h;
}

Request decode_request(const uint8_t* data, size_t size) {
  Reader r(data, size);
  Request q;
  const uint8_t op = r.u8();
  q.op = static_cast<Op>(op);
  switch (q.op) {
    case Op::kSet:
      q.key = r.str();
      q.value = r.bytes();
      break;
    case Op::kGet:
      q.key = r.str();
      q.timeout_ms = r.i64();
      break;
    case Op::kAdd:
      q.key = r.str();
      q.delta = r.i64();
      break;
    case Op::kCompareSet:
      q.key = r.str();
      q.expected = r.bytes();
      q.desired = r.bytes();
      break;
    case Op::kDelete:
      q.key = r.str();
      break;
    case Op::kCheck:
      q.keys = r.strings();
      break;
    case Op::kWait:
      q.keys = r.strings();
      q.timeout_ms = r.i64();
      break;
    case Op::kNumKeys:
      break;
    default:
      TS_THROW(StoreError, "unknown store request op ", int(op),
               "; the peer is not a Tessera store client of the same version");
  }
  TS_CHECK_T(StoreError, r.done(), "malformed store request (op ", int(op),
             ") with bytes after its last field");
  return q;
}

}  // namespace tessera::comm::proto
