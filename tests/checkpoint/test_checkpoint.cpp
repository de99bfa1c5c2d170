// Checkpoint save/load: round trips in one process and across ranks as threads
// (store and gloo coordinators), layout, the latest pointer, and pruning.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "checkpoint_test_util.h"
#include "tessera/checkpoint/crc32c.h"
#include "tessera/checkpoint/group_coordinator.h"
#include "tessera/comm/backend_registry.h"
#include "tessera/core/error.h"
#include "testing/thread_ranks.h"

namespace tessera::checkpoint {
namespace {

namespace fs = std::filesystem;
using test::make_state;
using test::TempDir;

TEST(Crc32c, KnownVectorAndIncremental) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c(s.data(), s.size()), 0xE3069283u);
  std::string big(10007, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31 + 7);
  uint32_t whole = crc32c(big.data(), big.size());
  uint32_t parts = crc32c_extend(crc32c(big.data(), 1234), big.data() + 1234, big.size() - 1234);
  EXPECT_EQ(whole, parts);
  EXPECT_EQ(crc32c_hex(0xE3069283u), "e3069283");
  // Combining the checksums of two parts gives the checksum of the whole.
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{1234}, big.size() - 1, big.size()}) {
    const uint32_t a = crc32c(big.data(), split);
    const uint32_t b = crc32c(big.data() + split, big.size() - split);
    EXPECT_EQ(crc32c_combine(a, b, big.size() - split), whole) << "split at " << split;
  }
}

TEST(Checkpoint, RoundTripOneProcess) {
  TempDir tmp;
  CheckpointWriter writer(tmp.path() + "/ckpt", std::make_shared<LocalCoordinator>());
  std::string sdir = writer.save(5, make_state(5, 0));
  EXPECT_EQ(sdir, tmp.path() + "/ckpt/step_5");
  for (const char* f : {"manifest.json", "replicated.tsr", "rank_00000.tsr"}) {
    EXPECT_TRUE(fs::exists(sdir + "/" + f)) << f;
  }
  EXPECT_EQ(latest_checkpoint(tmp.path() + "/ckpt"), sdir);
  test::expect_checkpoint(sdir, 5, 1);
  auto reader = CheckpointReader::open(sdir);
  EXPECT_EQ(reader.manifest().files.size(), 2u);
  EXPECT_THROW(reader.per_rank(1), CheckpointError);
  EXPECT_EQ(find_tensor(reader.replicated(), "ids")[2].item<int64_t>(), 10);
  EXPECT_THROW(find_tensor(reader.replicated(), "nope"), CheckpointError);
  for (const auto& e : fs::directory_iterator(sdir)) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temp file left behind";
  }
}

TEST(Checkpoint, NoCheckpointYet) {
  TempDir tmp;
  EXPECT_FALSE(latest_checkpoint(tmp.path()).has_value());
  EXPECT_FALSE(latest_checkpoint(tmp.path() + "/absent").has_value());
}

TEST(Checkpoint, ThreeRanksThroughTheStore) {
  TempDir tmp;
  const std::string dir = tmp.path();
  std::shared_ptr<comm::Store> shared_store;
  testing::run_ranks(3, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    if (rank == 0) shared_store = store;
    CheckpointWriter writer(dir, std::make_shared<StoreCoordinator>(store, rank, size));
    for (int64_t step : {10, 20}) {
      CheckpointState s = make_state(step, rank);
      if (rank != 0) s.replicated.clear();  // only rank 0's copy is written
      writer.save(step, s);
      // save() returns only after the commit: any rank sees it at once.
      EXPECT_TRUE(fs::exists(step_dir(dir, step) + "/manifest.json"));
    }
  });
  EXPECT_EQ(shared_store->num_keys(), 0) << "coordinator rounds leave no keys behind";
  EXPECT_EQ(list_steps(dir), (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(latest_checkpoint(dir), step_dir(dir, 20));
  test::expect_checkpoint(step_dir(dir, 10), 10, 3);
  test::expect_checkpoint(step_dir(dir, 20), 20, 3);
}

TEST(Checkpoint, KeepLastPrunesOldSteps) {
  TempDir tmp;
  CheckpointWriterOptions o;
  o.keep_last = 2;
  CheckpointWriter writer(tmp.path(), std::make_shared<LocalCoordinator>(), o);
  for (int64_t step = 1; step <= 4; ++step) writer.save(step, make_state(step, 0));
  EXPECT_EQ(list_steps(tmp.path()), (std::vector<int64_t>{3, 4}));
  EXPECT_FALSE(fs::exists(step_dir(tmp.path(), 1)));
  test::expect_checkpoint(step_dir(tmp.path(), 3), 3, 1);
}

TEST(Checkpoint, TwoRanksOverGloo) {
  auto backends = comm::available_backends();
  if (std::find(backends.begin(), backends.end(), "gloo") == backends.end()) {
    GTEST_SKIP() << "gloo backend not built";
  }
  TempDir tmp;
  const std::string dir = tmp.path();
  testing::run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = testing::make_group(rank, size, store, "gloo", 10);
    CheckpointWriter writer(dir, make_group_coordinator(group));
    writer.save(7, make_state(7, rank));
    group->shutdown();
  });
  test::expect_checkpoint(step_dir(dir, 7), 7, 2);
}

}  // namespace
}  // namespace tessera::checkpoint
