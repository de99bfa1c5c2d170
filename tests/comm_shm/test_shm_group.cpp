// The shm backend under ProcessGroup (ranks as threads): "auto" picks it on one
// host, half types and AVG go through natively, p2p and subgroups work. And the
// hierarchical backend with emulated hosts (threads told which "host" they are
// on): composed all_reduce against a local reference, uneven hosts falling back.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "comm_shm/shm_test_util.h"
#include "testing/thread_ranks.h"
#include "tessera/comm/backend_registry.h"
#include "tessera/comm/base/tcp_store.h"
#include "tessera/comm/hierarchical/hierarchical_backend.h"
#include "tessera/comm/process_group.h"

namespace tessera::comm {
namespace {

using testing::rank_data;
using testing::reference_reduce;
using tessera::testing::run_ranks;

std::shared_ptr<ProcessGroup> group(int rank, int size, std::shared_ptr<Store> store,
                                    const std::string& backend) {
  ProcessGroupOptions o;
  o.backend = backend;
  o.timeout = std::chrono::seconds(20);
  o.heartbeat_interval = 0;
  o.stall_warn = 0;
  return std::make_shared<ProcessGroup>(std::move(store), rank, size, o);
}

TEST(ShmGroup, AutoPicksShmOnOneHostAndCollectivesWork) {
  run_ranks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = group(rank, size, store, "auto");
    EXPECT_EQ(pg->backend_name(), "shm");
    std::vector<at::Tensor> inputs;
    for (int r = 0; r < size; ++r) inputs.push_back(rank_data(r, 100000, at::kBFloat16, 9));
    at::Tensor t = inputs[rank].clone().view({100, 1000}).t();  // non-contiguous
    pg->all_reduce(t, ReduceOp::kAvg)->wait();
    EXPECT_TRUE(at::equal(t.t().reshape({-1}), reference_reduce(inputs, ReduceOp::kAvg)));

    std::vector<at::Tensor> outs;
    for (int r = 0; r < size; ++r) outs.push_back(at::empty({7}, at::kLong));
    pg->all_gather(outs, at::full({7}, rank, at::kLong))->wait();
    for (int r = 0; r < size; ++r) EXPECT_TRUE(at::equal(outs[r], at::full({7}, r, at::kLong)));

    at::Tensor msg = at::full({5000}, rank, at::kFloat);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    auto sent = pg->send(msg, next, 3);
    at::Tensor got = at::empty({5000}, at::kFloat);
    pg->recv(got, prev, 3)->wait();
    sent->wait();
    EXPECT_TRUE(at::equal(got, at::full({5000}, prev, at::kFloat)));

    auto sub = pg->new_subgroup({0, 2});
    if (sub) {
      at::Tensor s = at::full({3}, rank + 1, at::kInt);
      sub->all_reduce(s, ReduceOp::kProduct)->wait();
      EXPECT_TRUE(at::equal(s, at::full({3}, 3, at::kInt)));
    }
    pg->barrier()->wait();
  });
  EXPECT_TRUE(testing::segments_of({getpid()}).empty());
}

// Four threads on two emulated hosts of two ranks: the composed path.
void check_hierarchical(const std::vector<int>& hosts, bool expect_composed) {
  int size = static_cast<int>(hosts.size());
  run_ranks(size, [&](int rank, int, std::shared_ptr<Store> store) {
    BackendContext ctx;
    ctx.store = store;
    ctx.rank = rank;
    ctx.size = size;
    ctx.timeout = std::chrono::seconds(20);
    ctx.group_name = "hier";
    HierarchicalBackend b(ctx, hosts);
    EXPECT_EQ(b.composed(), expect_composed);
    for (int64_t n : {int64_t(0), int64_t(3), int64_t(100003)}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        std::vector<at::Tensor> ins;
        for (int r = 0; r < size; ++r) ins.push_back(rank_data(r, n, at::kLong, 10));
        at::Tensor t = ins[rank].clone();
        b.all_reduce(t, op);
        EXPECT_TRUE(at::equal(t, reference_reduce(ins, op))) << to_string(op) << " n=" << n;
        std::vector<at::Tensor> fins;
        for (int r = 0; r < size; ++r) fins.push_back(rank_data(r, n, at::kFloat, 11));
        at::Tensor f = fins[rank].clone();
        b.all_reduce(f, op);
        EXPECT_TRUE(at::allclose(f, reference_reduce(fins, op), 1e-5, 1e-5)) << to_string(op);
      }
    }
    at::Tensor x = at::full({10}, rank, at::kFloat);
    b.broadcast(x, size - 1);
    EXPECT_TRUE(at::equal(x, at::full({10}, size - 1, at::kFloat)));
    b.barrier();
  });
}

TEST(Hierarchical, TwoHostsOfTwoRanksCompose) {
  if (!has_backend("gloo")) GTEST_SKIP() << "no gloo in this build";
  check_hierarchical({0, 0, 1, 1}, true);
}

TEST(Hierarchical, UnevenHostsFallBackToFlat) {
  if (!has_backend("gloo")) GTEST_SKIP() << "no gloo in this build";
  check_hierarchical({0, 0, 0, 1}, false);
}

TEST(Hierarchical, OneRankPerHostUsesInterOnly) {
  if (!has_backend("gloo")) GTEST_SKIP() << "no gloo in this build";
  check_hierarchical({0, 1, 2}, true);
}

// ---- Real processes on emulated hosts (network namespaces), without the
// launcher: 4 ranks, 2 per namespace, ProcessGroup with backend auto.

constexpr const char* kWorkerVar = "TESSERA_SHM_TEST_WORKER";  // "rank,size,port"

// Runs only inside the processes the test below starts.
TEST(ShmWorker, HierarchicalAllReduceAcrossNamespaces) {
  const char* spec = std::getenv(kWorkerVar);
  if (spec == nullptr) GTEST_SKIP() << "helper of MultiHost.NamespacesAutoPicksHierarchical";
  int rank = 0, size = 0, port = 0;
  ASSERT_EQ(std::sscanf(spec, "%d,%d,%d", &rank, &size, &port), 3);
  std::unique_ptr<TcpStoreServer> server;
  if (rank == 0) server = std::make_unique<TcpStoreServer>("10.200.0.1", port, "");
  auto store = std::make_shared<TcpStore>("10.200.0.1", port, "", std::chrono::seconds(20));
  auto pg = group(rank, size, store, "auto");
  EXPECT_EQ(pg->backend_name(), "hierarchical");
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(300001)}) {
    std::vector<at::Tensor> ins;
    for (int r = 0; r < size; ++r) ins.push_back(rank_data(r, n, at::kLong, 12));
    at::Tensor t = ins[rank].clone();
    pg->all_reduce(t, ReduceOp::kSum)->wait();
    EXPECT_TRUE(at::equal(t, reference_reduce(ins, ReduceOp::kSum))) << "n=" << n;
  }
  at::Tensor h = at::full({4096}, 0.5, at::kHalf);
  pg->all_reduce(h, ReduceOp::kAvg)->wait();
  EXPECT_TRUE(at::equal(h, at::full({4096}, 0.5, at::kHalf)));
  std::vector<at::Tensor> outs;
  for (int r = 0; r < size; ++r) outs.push_back(at::empty({3}, at::kInt));
  pg->all_gather(outs, at::full({3}, rank, at::kInt))->wait();
  for (int r = 0; r < size; ++r) EXPECT_TRUE(at::equal(outs[r], at::full({3}, r, at::kInt)));
  pg->barrier()->wait();
  pg.reset();
  // The store server (rank 0) must outlive every client's last call.
  store->add("done", 1);
  if (rank == 0) {
    while (store->add("done", 0) < size) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string shell_output(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  while (p != nullptr && std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  *status = p == nullptr ? -1 : pclose(p);
  return out;
}

TEST(MultiHost, NamespacesAutoPicksHierarchical) {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  std::string script = std::string(src ? src : ".") + "/scripts/netns-hosts.sh";
  int status = 0;
  if (geteuid() != 0 || (shell_output("command -v ip", &status), status != 0)) {
    GTEST_SKIP() << "needs root and iproute2 to create network namespaces";
  }
  std::string up = shell_output(script + " up 2", &status);
  ASSERT_EQ(status, 0) << up;
  char self[PATH_MAX] = {0};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  std::string cmd;
  for (int r = 0; r < 4; ++r) {
    cmd += "ip netns exec tessera-h" + std::to_string(r / 2) + " env " + kWorkerVar + "=" +
           std::to_string(r) + ",4,29641 TESSERA_GLOO_IFACE=eth0 timeout 60 " + self +
           " --gtest_filter=ShmWorker.* > /tmp/tessera_shm_worker_" + std::to_string(r) +
           ".log 2>&1 & ";
  }
  cmd +=
      "fail=0; for p in $(jobs -p); do wait $p || fail=1; done; "
      "cat /tmp/tessera_shm_worker_*.log; rm -f /tmp/tessera_shm_worker_*.log; exit $fail";
  std::string out = shell_output("bash -c '" + cmd + "'", &status);
  shell_output(script + " down 2", &status);
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
  EXPECT_EQ(out.find("FAILED"), std::string::npos) << out;
  EXPECT_EQ(shell_output("ip netns list | grep -c tessera-", &status), "0\n");
}

}  // namespace
}  // namespace tessera::comm
