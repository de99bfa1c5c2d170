// TcpStore over real sockets: concurrency, the job token, the bind address, and
// faults (server gone, port in use, server not up yet, stalled or foreign peers).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "store_test_util.h"
#include "tessera/comm/base/tcp_store.h"
#include "tessera/core/error.h"
#include "tessera/core/timer.h"

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;
using testing::free_port;
using testing::listen_addresses;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A raw TCP connection to 127.0.0.1:port, for speaking to the server directly.
int raw_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

TEST(TcpStore, SixteenClientsAddAndSetWithoutLosingUpdates) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  constexpr int kThreads = 16, kAdds = 1000, kSets = 100;
  Stopwatch watch;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      TcpStore store("127.0.0.1", server.port(), "tok", 10s);
      for (int i = 0; i < kAdds; ++i) store.add("counter", 1);
      for (int i = 0; i < kSets; ++i) {
        store.set_string("t" + std::to_string(t) + "/" + std::to_string(i), std::to_string(i));
      }
    });
  }
  for (auto& th : threads) th.join();
  double secs = watch.seconds();
  TcpStore store("127.0.0.1", server.port(), "tok", 10s);
  EXPECT_EQ(store.add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(store.num_keys(), 1 + kThreads * kSets);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(store.get_string("t" + std::to_string(t) + "/" + std::to_string(kSets - 1)),
              std::to_string(kSets - 1));
  }
  std::printf("16 clients x (1000 add + 100 set): %.3f s, %.1f us per request\n", secs,
              secs * 1e6 / (kThreads * (kAdds + kSets)));
}

TEST(TcpStore, WrongOrMissingTokenIsRefusedAtOnce) {
  TcpStoreServer server("127.0.0.1", 0, "secret");
  for (std::string token : {"wrong", ""}) {
    Stopwatch watch;
    try {
      TcpStore store("127.0.0.1", server.port(), token, 10s);
      FAIL() << "token '" << token << "' must be refused";
    } catch (const StoreError& e) {
      std::string expected = "store at 127.0.0.1:" + std::to_string(server.port()) +
                             " refused the connection: wrong job token (set TESSERA_JOB_TOKEN";
      EXPECT_TRUE(contains(e.what(), expected)) << e.what();
    }
    EXPECT_LT(watch.seconds(), 2.0) << "a refusal must not be retried until the timeout";
  }
  TcpStore good("127.0.0.1", server.port(), "secret", 5s);
  good.set_string("k", "v");
  EXPECT_EQ(good.get_string("k"), "v");
}

TEST(TcpStore, ServerWithoutTokenIsOpen) {
  TcpStoreServer server("127.0.0.1", 0, "");
  TcpStore a("127.0.0.1", server.port(), "", 5s);
  TcpStore b("127.0.0.1", server.port(), "anything", 5s);
  a.set_string("k", "v");
  EXPECT_EQ(b.get_string("k"), "v");
}

TEST(TcpStore, ServerStopWakesABlockedGetWithinASecond) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  TcpStore store("127.0.0.1", server.port(), "tok", 30s);
  TcpStore idle("127.0.0.1", server.port(), "tok", 30s);
  auto blocked = std::async(std::launch::async, [&] {
    try {
      store.get("never");
      return std::string("get returned");
    } catch (const StoreError& e) {
      return std::string(e.what());
    }
  });
  std::this_thread::sleep_for(200ms);
  Stopwatch watch;
  server.stop();
  ASSERT_EQ(blocked.wait_for(3s), std::future_status::ready) << "get() hung after stop()";
  double secs = watch.seconds();
  std::string msg = blocked.get();
  EXPECT_TRUE(contains(msg, "closed the connection (the launcher or rank 0 exited?)")) << msg;
  EXPECT_LT(secs, 1.0);
  std::printf("blocked get() failed %.1f ms after stop()\n", secs * 1e3);
  // Later calls fail the same way; an idle client fails on its next call (and
  // the send into a closed socket must not raise SIGPIPE).
  EXPECT_THROW(store.set_string("k", "v"), StoreError);
  for (int i = 0; i < 3; ++i) EXPECT_THROW(idle.set_string("k", "v"), StoreError);
}

TEST(TcpStore, PortInUseNamesHostAndPort) {
  TcpStoreServer first("127.0.0.1", 0, "");
  try {
    TcpStoreServer second("127.0.0.1", first.port(), "");
    FAIL() << "binding a port in use must fail";
  } catch (const StoreError& e) {
    std::string expected = "127.0.0.1:" + std::to_string(first.port()) + " is in use";
    EXPECT_TRUE(contains(e.what(), expected)) << e.what();
    EXPECT_TRUE(contains(e.what(), "--master-port")) << e.what();
  }
  // The first server is unaffected.
  TcpStore store("127.0.0.1", first.port(), "", 5s);
  EXPECT_EQ(store.add("n", 1), 1);
}

TEST(TcpStore, PortZeroPicksAFreePortAndListensOnlyOnTheGivenAddress) {
  TcpStoreServer server("127.0.0.1", 0, "");
  ASSERT_GT(server.port(), 0);
  EXPECT_EQ(listen_addresses(server.port()), std::vector<std::string>{"127.0.0.1"});
  // Another loopback address: the server binds exactly it, so 127.0.0.1 is not served.
  TcpStoreServer other("127.0.0.2", 0, "");
  EXPECT_EQ(listen_addresses(other.port()), std::vector<std::string>{"127.0.0.2"});
  TcpStore ok("127.0.0.2", other.port(), "", 5s);
  ok.set_string("k", "v");
  EXPECT_THROW(TcpStore("127.0.0.1", other.port(), "", 300ms), StoreError);
}

TEST(TcpStore, ClientStartedBeforeTheServerConnectsWhenItAppears) {
  int port = free_port();
  auto client = std::async(std::launch::async, [&] {
    TcpStore store("127.0.0.1", port, "tok", 10s);
    return store.get_string("hello");
  });
  std::this_thread::sleep_for(300ms);
  TcpStoreServer server("127.0.0.1", port, "tok");
  TcpStore writer("127.0.0.1", port, "tok", 5s);
  writer.set_string("hello", "world");
  ASSERT_EQ(client.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(client.get(), "world");
}

TEST(TcpStore, UnreachableServerFailsAfterTheTimeoutWithAHint) {
  int port = free_port();
  Stopwatch watch;
  try {
    TcpStore store("127.0.0.1", port, "", 400ms);
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "could not reach the store at 127.0.0.1:" +
                                       std::to_string(port) + " within 0.4 s"))
        << e.what();
    EXPECT_TRUE(contains(e.what(), "MASTER_ADDR/MASTER_PORT")) << e.what();
  }
  EXPECT_GE(watch.seconds(), 0.39);
  EXPECT_LT(watch.seconds(), 2.0);
}

TEST(TcpStore, StalledServerNeverHangsTheClient) {
  // A socket that listens but never accepts: the kernel completes the TCP
  // handshake, then nobody answers ours.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  Stopwatch watch;
  EXPECT_THROW(TcpStore("127.0.0.1", port, "", 500ms), StoreError);
  EXPECT_LT(watch.seconds(), 2.0);
  // The port is taken by a listener: a store server on it must say so.
  EXPECT_THROW(TcpStoreServer("127.0.0.1", port, ""), StoreError);
  ::close(fd);
}

TEST(TcpStore, ABlockedClientDoesNotDelayOthers) {
  TcpStoreServer server("127.0.0.1", 0, "");
  TcpStore waiter("127.0.0.1", server.port(), "", 10s);
  TcpStore busy("127.0.0.1", server.port(), "", 10s);
  auto blocked = std::async(std::launch::async, [&] { return waiter.get_string("release"); });
  std::this_thread::sleep_for(50ms);
  Stopwatch watch;
  for (int i = 0; i < 200; ++i) busy.add("n", 1);
  EXPECT_LT(watch.seconds(), 1.0);
  EXPECT_EQ(blocked.wait_for(0ms), std::future_status::timeout);
  busy.set_string("release", "go");
  ASSERT_EQ(blocked.wait_for(2s), std::future_status::ready);
  EXPECT_EQ(blocked.get(), "go");
}

TEST(TcpStore, ForeignPeersAreDroppedAndTheServerKeepsServing) {
  TcpStoreServer server("127.0.0.1", 0, "");
  // An HTTP request instead of our handshake.
  int http = raw_connect(server.port());
  const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::send(http, req, sizeof(req) - 1, MSG_NOSIGNAL), 0);
  // A frame that announces 4 GiB before any handshake.
  int huge = raw_connect(server.port());
  const uint8_t len[] = {0xff, 0xff, 0xff, 0xff};
  ASSERT_EQ(::send(huge, len, 4, MSG_NOSIGNAL), 4);
  // Both are closed by the server (read returns EOF after any reply).
  char buf[512];
  for (int fd : {http, huge}) {
    timeval tv{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
    }
    EXPECT_EQ(n, 0) << "the server should close a foreign connection";
    ::close(fd);
  }
  TcpStore store("127.0.0.1", server.port(), "", 5s);
  EXPECT_EQ(store.add("n", 2), 2);
}

}  // namespace
}  // namespace tessera::comm
