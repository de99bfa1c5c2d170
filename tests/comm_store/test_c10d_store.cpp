// C10dStore against real c10d TCPStore servers: one hosted in this process by
// libtorch, one hosted by Python's torch.distributed in a subprocess (as
// torchrun's agent would), skipped when Python's torch is not installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <future>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "store_test_util.h"
#include "tessera/comm/base/c10d_store.h"
#include "tessera/core/error.h"
#include "tessera/core/timer.h"
#include "testing/subprocess.h"

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
Bytes b(const std::string& s) { return Bytes(s.begin(), s.end()); }

std::shared_ptr<c10d::TCPStore> start_c10d_server() {
  c10d::TCPStoreOptions opts;
  opts.port = 0;
  opts.isServer = true;
  opts.waitWorkers = false;
  opts.timeout = 10s;
  return std::make_shared<c10d::TCPStore>("127.0.0.1", opts);
}

TEST(C10dStore, RoundTripsThroughAnInProcessC10dServer) {
  auto server = start_c10d_server();
  int port = server->getPort();
  C10dStore store("127.0.0.1", port, 5s);
  store.set_string("k", "v");
  EXPECT_EQ(store.get_string("k"), "v");
  // Keys are the c10d keys: the server's own client sees them, and vice versa.
  EXPECT_EQ(server->get("k"), b("v"));
  server->set("from_server", b("s"));
  EXPECT_EQ(store.get_string("from_server"), "s");
  EXPECT_EQ(store.add("n", 3), 3);
  EXPECT_EQ(server->add("n", 4), 7);
  EXPECT_EQ(store.get_string("n"), "7");
  EXPECT_EQ(store.compare_set("c", {}, b("x")), b("x"));
  EXPECT_EQ(store.compare_set("c", b("x"), b("y")), b("y"));
  EXPECT_EQ(store.compare_set("c", b("x"), b("z")), b("y"));
  EXPECT_TRUE(store.check({"k", "n", "c"}));
  EXPECT_FALSE(store.check({"k", "absent"}));
  int64_t before = store.num_keys();
  EXPECT_TRUE(store.delete_key("k"));
  EXPECT_FALSE(store.delete_key("k"));
  EXPECT_EQ(store.num_keys(), before - 1);
  // A blocking get released by another client.
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    server->set("late", b("here"));
  });
  EXPECT_EQ(store.get_string("late"), "here");
  setter.join();
}

TEST(C10dStore, WaitTimeoutNamesTheMissingKeysAndTheStoreRecovers) {
  auto server = start_c10d_server();
  C10dStore store("127.0.0.1", server->getPort(), 5s);
  store.set_string("here", "1");
  Stopwatch watch;
  try {
    store.wait({"here", "missing_key"}, 300ms);
    FAIL() << "wait() must time out";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "missing_key")) << e.what();
    EXPECT_TRUE(contains(e.what(), "torchrun agent store at 127.0.0.1:")) << e.what();
  }
  EXPECT_LT(watch.seconds(), 3.0);
  // The next call runs on a fresh connection.
  EXPECT_EQ(store.get_string("here"), "1");
  EXPECT_EQ(store.add("n", 1), 1);
}

TEST(C10dStore, UnreachableAgentIsAStoreErrorAndNothingIsBound) {
  int port = testing::free_port();
  Stopwatch watch;
  try {
    C10dStore store("127.0.0.1", port, 500ms);
    FAIL() << "no server: must throw";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(
        e.what(), "could not reach the torchrun agent store at 127.0.0.1:" + std::to_string(port)))
        << e.what();
  }
  EXPECT_GE(watch.seconds(), 0.45);  // retried until the timeout
  EXPECT_LT(watch.seconds(), 5.0);
  EXPECT_TRUE(testing::listen_addresses(port).empty()) << "a client must never bind MASTER_PORT";
}

// The agent's store as torchrun hosts it: Python's torch.distributed.TCPStore.
const char* kPythonAgent = R"PY(
import os, sys, datetime
try:
    import torch.distributed as d
    assert d.is_available()
except Exception:
    sys.exit(77)
port_file = sys.argv[1]
s = d.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=20))
with open(port_file + ".tmp", "w") as f:
    f.write(str(s.port))
os.rename(port_file + ".tmp", port_file)
s.wait(["cpp/value"])
assert s.get("cpp/value") == b"from c++", s.get("cpp/value")
s.set("py/value", "from python")
s.wait(["cpp/done"])
assert int(s.get("counter")) == 5
print("python agent ok")
)PY";

TEST(C10dStore, JoinsAPythonTorchDistributedServer) {
  std::string dir = ::testing::TempDir();
  std::string script = dir + "tessera_agent_" + std::to_string(getpid()) + ".py";
  std::string port_file = script + ".port";
  std::ofstream(script) << kPythonAgent;
  std::remove(port_file.c_str());
  auto agent = std::async(std::launch::async, [&] {
    return testing::run_command(tessera::testing::python_bin() + " " + script + " " + port_file, 60);
  });
  int port = 0;
  Deadline deadline(45);
  while (!deadline.expired() && port == 0) {
    if (agent.wait_for(50ms) == std::future_status::ready) break;
    std::ifstream f(port_file);
    f >> port;
  }
  if (port == 0) {
    auto r = agent.get();
    std::remove(script.c_str());
    if (r.exit_code == 77 || r.exit_code == 127)
      GTEST_SKIP() << "python3 torch.distributed unavailable";
    FAIL() << "the Python agent store did not start (exit " << r.exit_code << "):\n" << r.output;
  }
  C10dStore store("127.0.0.1", port, 10s);
  store.set_string("cpp/value", "from c++");
  EXPECT_EQ(store.get_string("py/value"), "from python");
  EXPECT_EQ(store.add("counter", 2), 2);
  EXPECT_EQ(store.add("counter", 3), 5);
  store.set_string("cpp/done", "1");
  auto r = agent.get();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "python agent ok")) << r.output;
  std::printf("python agent round trip: %.2f s (mostly `import torch`)\n", r.seconds);
  std::remove(script.c_str());
  std::remove(port_file.c_str());
}

}  // namespace
}  // namespace tessera::comm
