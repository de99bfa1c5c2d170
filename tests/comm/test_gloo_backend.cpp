// The gloo backend below the ProcessGroup: address choice, p2p semantics (sends
// complete without the receiver), errors for unsupported input, and faults:
// a silent peer is a TimeoutError within the timeout, a peer that aborts makes
// the survivors fail fast, abort() wakes a blocked recv.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <future>
#include <thread>

#include "tessera/comm/base/prefix_store.h"
#include "tessera/comm/gloo/gloo_backend.h"
#include "tessera/comm/gloo/gloo_device.h"
#include "tessera/core/check.h"
#include "tessera/core/timer.h"
#include "testing/thread_ranks.h"

namespace tessera::testing {
namespace {

using comm::BackendContext;
using comm::GlooBackend;

std::unique_ptr<GlooBackend> make_backend(int rank, int size, std::shared_ptr<comm::Store> store,
                                          double timeout_s, const std::string& name = "g") {
  BackendContext ctx;
  ctx.store = std::make_shared<comm::PrefixStore>(name, store);
  ctx.rank = rank;
  ctx.size = size;
  ctx.group_name = name;
  ctx.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  return std::make_unique<GlooBackend>(ctx);
}

TEST(GlooAddress, LoopbackDetection) {
  EXPECT_TRUE(comm::is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(comm::is_loopback_host("127.3.2.1"));
  EXPECT_TRUE(comm::is_loopback_host("localhost"));
  EXPECT_TRUE(comm::is_loopback_host("::1"));
  EXPECT_FALSE(comm::is_loopback_host("10.0.0.1"));
  EXPECT_FALSE(comm::is_loopback_host("128.0.0.1"));
  EXPECT_FALSE(comm::is_loopback_host("node07"));
}

TEST(GlooAddress, HostnameVariableWins) {
  setenv("TESSERA_GLOO_HOSTNAME", "127.0.0.2", 1);
  auto a = comm::choose_gloo_address();
  EXPECT_EQ(a.hostname, "127.0.0.2");
  EXPECT_EQ(a.source, "TESSERA_GLOO_HOSTNAME");
  // Ranks bound to another loopback address still connect.
  run_ranks(2, [](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto b = make_backend(rank, size, store, 10);
    at::Tensor t = at::full({5}, rank + 1.0, at::kFloat);
    b->all_reduce(t, comm::ReduceOp::kSum);
    EXPECT_TRUE(at::equal(t, at::full({5}, 3.0, at::kFloat)));
    b->barrier();
  });
  unsetenv("TESSERA_GLOO_HOSTNAME");
  EXPECT_EQ(comm::choose_gloo_address().source, "MASTER_ADDR (loopback)");
}

// The store's host given by the launch (srun: node 0 of the step) wins over
// MASTER_ADDR, which srun does not set.
TEST(GlooAddress, TheStoreHostWinsOverMasterAddr) {
  setenv("MASTER_ADDR", "127.0.0.9", 1);
  const auto a = comm::choose_gloo_address("127.0.0.5");
  EXPECT_EQ(a.hostname, "127.0.0.5");
  EXPECT_EQ(a.source, "the store host (loopback)");
  EXPECT_EQ(comm::choose_gloo_address().hostname, "127.0.0.9");
  unsetenv("MASTER_ADDR");
}

// An interface that doesn't exist (no name lookup, no traffic).
TEST(GlooAddress, UnbindableAddressNamesTheVariable) {
  setenv("TESSERA_GLOO_IFACE", "tsnoiface0", 1);
  try {
    run_ranks(1, [](int rank, int size, std::shared_ptr<comm::Store> store) {
      // A group of one never binds; ask the device directly.
      comm::make_gloo_device(comm::choose_gloo_address());
    });
    ADD_FAILURE() << "binding to a missing interface succeeded";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("tsnoiface0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("TESSERA_GLOO_HOSTNAME"), std::string::npos) << e.what();
  }
  unsetenv("TESSERA_GLOO_IFACE");
}

// Both ranks send first, then receive, on one thread each: send() must not wait
// for the receiver. Large messages too, and the sender reuses its buffer at once.
TEST(GlooP2p, ExchangeSendsBeforeRecvs) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto b = make_backend(rank, size, store, 10);
    const int peer = 1 - rank;
    for (int64_t n : {int64_t{16}, int64_t{1} << 20}) {
      at::Tensor out = at::full({n}, rank + 10.0, at::kFloat);
      b->send(out, peer, 3);
      out.fill_(-1);  // must not change what the peer receives
      b->send(at::full({n}, rank + 20.0, at::kFloat), peer, 4);
      at::Tensor in3 = at::zeros({n}, at::kFloat), in4 = at::zeros({n}, at::kFloat);
      b->recv(in4, peer, 4);  // tags are matched independently of order
      b->recv(in3, peer, 3);
      EXPECT_TRUE(at::equal(in3, at::full({n}, peer + 10.0, at::kFloat))) << "n=" << n;
      EXPECT_TRUE(at::equal(in4, at::full({n}, peer + 20.0, at::kFloat))) << "n=" << n;
    }
    b->barrier();
  });
}

TEST(GlooErrors, UnsupportedInputIsCommError) {
  run_ranks(2, [](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto b = make_backend(rank, size, store, 10);
    EXPECT_FALSE(b->supports_avg());
    EXPECT_FALSE(b->reduces_natively(at::kHalf));
    EXPECT_FALSE(b->reduces_natively(at::kBFloat16));
    EXPECT_TRUE(b->reduces_natively(at::kFloat));
    at::Tensor t = at::ones({4}, at::kFloat);
    try {
      b->all_reduce(t, comm::ReduceOp::kAvg);
      ADD_FAILURE() << "avg accepted";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("does not support"), std::string::npos) << e.what();
    }
    at::Tensor c = at::ones({4}, at::kComplexFloat);
    EXPECT_THROW(b->all_reduce(c, comm::ReduceOp::kSum), CommError);
    EXPECT_THROW(b->send(t, rank, 0), CommError);  // to itself
    // The failed calls were rejected before touching the network: still usable.
    b->all_reduce(t, comm::ReduceOp::kSum);
    EXPECT_TRUE(at::equal(t, at::full({4}, 2.0, at::kFloat)));
    b->barrier();
  });
}

// Rank 1 never joins the all_reduce: rank 0 gets a TimeoutError after ~1 s.
TEST(GlooFaults, SilentPeerIsTimeoutError) {
  std::promise<void> done;
  auto done_future = done.get_future().share();
  run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto b = make_backend(rank, size, store, 1.0);
    if (rank == 1) {
      done_future.wait();  // stay alive but silent
      return;
    }
    at::Tensor t = at::ones({1000}, at::kFloat);
    Stopwatch sw;
    EXPECT_THROW(b->all_reduce(t, comm::ReduceOp::kSum), TimeoutError);
    EXPECT_LT(sw.seconds(), 4.0);
    EXPECT_GE(sw.seconds(), 0.9);
    done.set_value();
  });
}

// Rank 1 aborts while rank 0 waits in a collective with a long timeout: rank 0
// fails fast with a CommError instead of waiting 30 s.
TEST(GlooFaults, AbortedPeerMakesSurvivorFailFast) {
  std::promise<void> done;
  auto done_future = done.get_future().share();
  run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto b = make_backend(rank, size, store, 30);
    b->barrier();
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      b->abort();
      EXPECT_THROW(b->barrier(), CommError);  // after abort: fails at once
      done_future.wait();  // alive (not destroyed) until rank 0 saw the failure
      return;
    }
    at::Tensor t = at::ones({1000}, at::kFloat);
    Stopwatch sw;
    EXPECT_THROW(b->all_reduce(t, comm::ReduceOp::kSum), CommError);
    EXPECT_LT(sw.seconds(), 5.0);
    done.set_value();
  });
}

// abort() from another thread wakes this rank's own blocked recv.
TEST(GlooFaults, AbortWakesBlockedRecv) {
  std::promise<void> done;
  auto done_future = done.get_future().share();
  run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto b = make_backend(rank, size, store, 30);
    b->barrier();
    if (rank == 1) {
      done_future.wait();  // alive but never sends: only abort() can end the recv
      return;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      b->abort();
    });
    at::Tensor t = at::zeros({10}, at::kFloat);
    Stopwatch sw;
    try {
      b->recv(t, 1, 0);
      ADD_FAILURE() << "recv returned without data";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
    }
    EXPECT_LT(sw.seconds(), 5.0);
    aborter.join();
    done.set_value();
  });
}

// Through the ProcessGroup: the TimeoutError keeps its type and names the op.
TEST(GlooFaults, ProcessGroupTimeoutNamesTheOp) {
  std::promise<void> done;
  auto done_future = done.get_future().share();
  run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto g = make_group(rank, size, store, "gloo", 1.0);
    g->barrier()->wait();
    if (rank == 1) {
      done_future.wait();
      return;
    }
    at::Tensor t = at::ones({64}, at::kFloat);
    try {
      g->all_reduce(t)->wait();
      ADD_FAILURE() << "all_reduce without the peer succeeded";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
    }
    done.set_value();
  });
}

}  // namespace
}  // namespace tessera::testing
