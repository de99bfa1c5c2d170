// Fuzz target: one TcpStore frame payload, as any peer that can reach
// MASTER_PORT may send it. decode_request and decode_handshake must accept or
// throw StoreError, never read outside the payload. Decoding is strict, so an
// accepted request, encoded again the way TcpStore encodes it, must give back
// exactly the input. Returns 1 for an accepted request or a complete handshake.
#include "fuzz_targets.h"
#include "tessera/comm/base/tcp_store_protocol.h"
#include "tessera/core/error.h"

namespace tessera::fuzz {
namespace {

using comm::Bytes;
using comm::proto::Op;

Bytes payload_of(const comm::proto::Writer& w) {
  Bytes frame = w.frame();
  return Bytes(frame.begin() + 4, frame.end());  // without the length prefix
}

// The client's encoding of each request (tcp_store.cpp).
Bytes encode(const comm::proto::Request& q) {
  comm::proto::Writer w;
  w.u8(static_cast<uint8_t>(q.op));
  switch (q.op) {
    case Op::kSet:
      w.blob(q.key).blob(q.value);
      break;
    case Op::kGet:
      w.blob(q.key).i64(q.timeout_ms);
      break;
    case Op::kAdd:
      w.blob(q.key).i64(q.delta);
      break;
    case Op::kCompareSet:
      w.blob(q.key).blob(q.expected).blob(q.desired);
      break;
    case Op::kDelete:
      w.blob(q.key);
      break;
    case Op::kCheck:
      w.strings(q.keys);
      break;
    case Op::kWait:
      w.strings(q.keys).i64(q.timeout_ms);
      break;
    case Op::kNumKeys:
      break;
  }
  return payload_of(w);
}

}  // namespace

int fuzz_store_request(const uint8_t* data, size_t size) {
  const Bytes input(data, data + size);
  int accepted = 0;
  try {
    const auto q = comm::proto::decode_request(data, size);
    expect(encode(q) == input, "decode_request accepted a payload it does not re-encode to");
    accepted = 1;
  } catch (const StoreError&) {
  }
  try {
    const auto h = comm::proto::decode_handshake(data, size);
    if (h.magic == comm::proto::kMagic && h.version == comm::proto::kVersion) {
      comm::proto::Writer w;
      w.u32(h.magic).u32(h.version).blob(h.token);
      expect(payload_of(w) == input, "decode_handshake accepted trailing bytes");
      accepted = 1;
    }
  } catch (const StoreError&) {
  }
  return accepted;
}

}  // namespace tessera::fuzz

#ifdef TESSERA_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::fuzz_store_request(data, size);
  return 0;
}
#endif
