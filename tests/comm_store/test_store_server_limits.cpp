// TcpStoreServer against misbehaving peers that got past the handshake: an
// oversized frame, malformed requests, a flood of input while a request is
// parked, and pipelined requests whose replies are never read. Each such client
// gets an error reply (when it still reads) and is disconnected; the server's
// memory for it stays bounded, and every other client keeps being served. Also:
// an add() that would overflow the counter is an error reply, not undefined
// behaviour in the server.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tessera/comm/base/tcp_store.h"
#include "tessera/comm/base/tcp_store_protocol.h"
#include "tessera/core/error.h"

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;
using proto::Op;
using proto::Status;

// A raw connection to the server on 127.0.0.1, speaking the protocol by hand.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval tv{10, 0};  // no test may hang on a server that keeps the link open
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }
  ~RawClient() { ::close(fd_); }

  // Sends all bytes; false once the server has closed or reset the connection.
  bool send_bytes(const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }
  bool send_bytes(const Bytes& b) { return send_bytes(b.data(), b.size()); }
  bool send_frame(const proto::Writer& w) { return send_bytes(w.frame()); }

  // The next frame's payload; nullopt on EOF or reset (never on a timeout: that fails).
  std::optional<Bytes> recv_frame() {
    uint8_t len[4];
    if (!recv_exact(len, 4)) return std::nullopt;
    Bytes payload(proto::decode_length(len));
    if (!recv_exact(payload.data(), payload.size())) return std::nullopt;
    return payload;
  }

  // The protocol's first exchange: our magic, version and token, the server's OK.
  void handshake(const std::string& token) {
    proto::Writer w;
    w.u32(proto::kMagic).u32(proto::kVersion).blob(token);
    ASSERT_TRUE(send_frame(w));
    auto reply = recv_frame();
    ASSERT_TRUE(reply.has_value()) << "the server closed the connection during the handshake";
    proto::Reader r(*reply);
    ASSERT_EQ(r.u8(), uint8_t(Status::kOk));
    EXPECT_EQ(r.str(), "");
  }

  // Expects an error reply (its message returned) and then the end of the stream.
  std::string expect_error_then_closed() {
    auto reply = recv_frame();
    if (!reply) {
      ADD_FAILURE() << "the connection was closed without an error reply";
      return "";
    }
    proto::Reader r(*reply);
    EXPECT_EQ(r.u8(), uint8_t(Status::kError));
    std::string message = r.str();
    expect_closed();
    return message;
  }

  // Reads until EOF or reset; returns the bytes read on the way. Fails on a timeout.
  size_t expect_closed() {
    char buf[65536];
    size_t total = 0;
    while (true) {
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        total += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      EXPECT_TRUE(n == 0 || errno == ECONNRESET)
          << "the server kept the connection open (" << std::strerror(errno) << ")";
      return total;
    }
  }

 private:
  bool recv_exact(void* data, size_t size) {
    char* p = static_cast<char*>(data);
    while (size > 0) {
      ssize_t n = ::recv(fd_, p, size, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        ADD_FAILURE() << "no reply from the server within 10 s";
        return false;
      }
      if (n <= 0) return false;
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }

  int fd_ = -1;
};

// A frame around a payload given byte by byte (proto::Writer cannot build bad ones).
Bytes frame_of(const Bytes& payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  Bytes f = {uint8_t(n >> 24), uint8_t(n >> 16), uint8_t(n >> 8), uint8_t(n)};
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A client of its own that must still work after the misbehaving ones.
void expect_served(int port) {
  TcpStore store("127.0.0.1", port, "tok", 5s);
  store.set_string("still", "served");
  EXPECT_EQ(store.get_string("still"), "served");
  const int64_t after = store.add("counter", 1);
  EXPECT_EQ(store.add("counter", 0), after);
}

TEST(TcpStoreServerLimits, OversizedFramesGetAnErrorAndAreDisconnected) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  TcpStore bystander("127.0.0.1", server.port(), "tok", 5s);  // connected throughout
  for (uint32_t len : {proto::kMaxFrame + 1, 0xffffffffu}) {
    RawClient c(server.port());
    c.handshake("tok");
    const uint8_t header[4] = {uint8_t(len >> 24), uint8_t(len >> 16), uint8_t(len >> 8),
                               uint8_t(len)};
    ASSERT_TRUE(c.send_bytes(header, 4));
    const std::string message = c.expect_error_then_closed();
    EXPECT_TRUE(contains(message, std::to_string(len) + "-byte frame is over")) << message;
  }
  bystander.set_string("k", "v");
  EXPECT_EQ(bystander.get_string("k"), "v");
  expect_served(server.port());
}

TEST(TcpStoreServerLimits, MalformedRequestsGetAnErrorAndAreDisconnected) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  TcpStore bystander("127.0.0.1", server.port(), "tok", 5s);
  struct Case {
    const char* what;
    Bytes payload;
    const char* expected;  // part of the error message
  };
  auto payload = [](const proto::Writer& w) {
    Bytes f = w.frame();
    return Bytes(f.begin() + 4, f.end());
  };
  const std::vector<Case> cases = {
      {"an empty request", {}, "malformed store message"},
      {"an unknown op", {0x63, 1, 2, 3}, "unknown store request op 99"},
      {"a set without its value",
       payload(proto::Writer().u8(uint8_t(Op::kSet)).blob(std::string("k"))),
       "malformed store message"},
      {"a key longer than the payload",
       {uint8_t(Op::kDelete), 0x7f, 0xff, 0xff, 0xff, 'k'},
       "malformed store message"},
      {"a check announcing 2^62 keys",
       payload(proto::Writer().u8(uint8_t(Op::kCheck)).i64(int64_t{1} << 62)), "keys announced"},
      {"a wait announcing -1 keys", payload(proto::Writer().u8(uint8_t(Op::kWait)).i64(-1).i64(0)),
       "keys announced"},
      {"num_keys with trailing bytes", {uint8_t(Op::kNumKeys), 0}, "bytes after its last field"},
      {"random bytes", {0x07, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x11}, "malformed store message"},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.what);
    RawClient c(server.port());
    c.handshake("tok");
    ASSERT_TRUE(c.send_bytes(frame_of(k.payload)));
    const std::string message = c.expect_error_then_closed();
    EXPECT_TRUE(contains(message, k.expected)) << message;
  }
  EXPECT_EQ(bystander.num_keys(), 0);
  expect_served(server.port());
}

TEST(TcpStoreServerLimits, AFloodWhileARequestIsParkedIsCutOffAtTheInputLimit) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  RawClient c(server.port());
  c.handshake("tok");
  // A get that parks (the key never comes), then far more input than one frame:
  // the server must not buffer it all while the get waits.
  ASSERT_TRUE(
      c.send_frame(proto::Writer().u8(uint8_t(Op::kGet)).blob(std::string("never")).i64(60000)));
  const Bytes chunk(1 << 20, 0x01);
  size_t sent = 0;
  while (sent < 4 * size_t{proto::kMaxFrame} && c.send_bytes(chunk)) sent += chunk.size();
  EXPECT_LT(sent, 4 * size_t{proto::kMaxFrame}) << "the server kept reading a flood";
  // The error reply may be lost to the reset of a connection with unread input.
  c.expect_closed();
  expect_served(server.port());
}

TEST(TcpStoreServerLimits, AClientThatDoesNotReadItsRepliesIsDropped) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  TcpStore store("127.0.0.1", server.port(), "tok", 10s);
  const Bytes big(32 << 20, 0x5a);  // a legal value, half the frame limit
  store.set("big", big);
  EXPECT_EQ(store.get("big"), big);
  RawClient c(server.port());
  c.handshake("tok");
  // Pipelined gets of the big value, replies unread: 16 x 32 MiB if it served them all.
  constexpr int kGets = 16;
  Bytes requests;
  for (int i = 0; i < kGets; ++i) {
    Bytes f = proto::Writer().u8(uint8_t(Op::kGet)).blob(std::string("big")).i64(1000).frame();
    requests.insert(requests.end(), f.begin(), f.end());
  }
  ASSERT_TRUE(c.send_bytes(requests));
  std::this_thread::sleep_for(500ms);  // let the server queue what it will
  const size_t received = c.expect_closed();
  EXPECT_LT(received, kGets * big.size()) << "the server answered every pipelined request";
  EXPECT_EQ(store.get("big"), big);
  expect_served(server.port());
}

TEST(TcpStoreServerLimits, AnAddThatWouldOverflowIsAnErrorAndTheCounterIsKept) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  TcpStore store("127.0.0.1", server.port(), "tok", 5s);
  store.set_string("c", std::to_string(INT64_MAX));
  for (int64_t delta : {int64_t{1}, INT64_MAX}) {
    try {
      store.add("c", delta);
      FAIL() << "add(" << delta << ") past INT64_MAX must fail";
    } catch (const StoreError& e) {
      EXPECT_TRUE(contains(e.what(), "overflows a 64-bit counter")) << e.what();
    }
  }
  EXPECT_EQ(store.add("c", -1), INT64_MAX - 1);  // same connection, value intact
  store.set_string("c", std::to_string(INT64_MIN));
  EXPECT_THROW(store.add("c", -1), StoreError);
  expect_served(server.port());
}

}  // namespace
}  // namespace tessera::comm
