// Asynchronous checkpoints: the snapshot holds the state of the step it was
// taken at, the commit protocol is the synchronous one (ranks as threads over a
// store), and a background failure is thrown by the next save naming the rank
// and the tensor, with nothing committed. (A worker killed during the
// background write: tests/cli, through the launcher.)
#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint_test_util.h"
#include "tessera/checkpoint/async_checkpoint_writer.h"
#include "tessera/core/error.h"
#include "testing/thread_ranks.h"

namespace tessera::checkpoint {
namespace {

namespace fs = std::filesystem;
using test::make_state;
using test::TempDir;

// Overwrites every tensor of `s`, as the next optimizer step would.
void scribble(CheckpointState& s) {
  for (auto& [name, t] : s.replicated) t.fill_(7);
  for (auto& [name, t] : s.per_rank) t.fill_(7);
}

TEST(AsyncCheckpoint, TheSnapshotIsTheStateAtTheSaveWhateverHappensAfter) {
  for (AsyncMode mode : {AsyncMode::kAsync, AsyncMode::kAsyncWithPinnedMem}) {
    TempDir tmp;
    AsyncCheckpointWriter writer(tmp.path(), std::make_shared<LocalCoordinator>(), {}, mode);
    for (int64_t step : {1, 2}) {
      CheckpointState s = make_state(step, 0);
      const AsyncSaveTimes times = writer.save(step, s);
      EXPECT_GE(times.snapshot_seconds, 0.0);
      scribble(s);  // training goes on at once
      EXPECT_TRUE(writer.in_flight());
    }
    auto done = writer.wait();
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->step, 2);
    EXPECT_EQ(done->step_dir, step_dir(tmp.path(), 2));
    EXPECT_FALSE(writer.in_flight());
    EXPECT_FALSE(writer.wait().has_value()) << "a save reported twice";
    EXPECT_EQ(latest_checkpoint(tmp.path()), step_dir(tmp.path(), 2));
    test::expect_checkpoint(step_dir(tmp.path(), 1), 1, 1);
    test::expect_checkpoint(step_dir(tmp.path(), 2), 2, 1);
    // async_with_pinned_mem keeps its host buffers for the next save; async not.
    if (mode == AsyncMode::kAsyncWithPinnedMem) {
      EXPECT_GT(writer.buffer_bytes(), 0);
    } else {
      EXPECT_EQ(writer.buffer_bytes(), 0);
    }
  }
}

TEST(AsyncCheckpoint, ThreeRanksCommitThroughTheStoreAndPruneInTheBackground) {
  TempDir tmp;
  const std::string dir = tmp.path();
  std::shared_ptr<comm::Store> shared_store;
  testing::run_ranks(3, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    if (rank == 0) shared_store = store;
    CheckpointWriterOptions options;
    options.keep_last = 2;
    AsyncCheckpointWriter writer(dir, std::make_shared<StoreCoordinator>(store, rank, size),
                                 options, AsyncMode::kAsyncWithPinnedMem);
    for (int64_t step : {4, 8, 12}) {
      CheckpointState s = make_state(step, rank);
      if (rank != 0) s.replicated.clear();
      writer.save(step, s);
      scribble(s);
    }
    ASSERT_TRUE(writer.wait().has_value());
  });
  EXPECT_EQ(shared_store->num_keys(), 0) << "coordinator rounds leave no keys behind";
  EXPECT_EQ(list_steps(dir), (std::vector<int64_t>{8, 12}));
  EXPECT_FALSE(fs::exists(step_dir(dir, 4))) << "not pruned";
  test::expect_checkpoint(step_dir(dir, 8), 8, 3);
  test::expect_checkpoint(step_dir(dir, 12), 12, 3);
}

TEST(AsyncCheckpoint, ABackgroundFailureIsThrownByTheNextSaveAndCommitsNothing) {
  TempDir tmp;
  const std::string dir = tmp.path();
  testing::run_ranks(3, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    AsyncCheckpointWriter writer(dir, std::make_shared<StoreCoordinator>(store, rank, size), {},
                                 AsyncMode::kAsync);
    writer.save(1, make_state(1, rank));
    CheckpointState bad = make_state(2, rank);
    // Complex tensors are not a checkpoint dtype: rank 2's background write fails.
    if (rank == 2) bad.per_rank.emplace_back("z", at::zeros({2}, at::kComplexFloat));
    writer.save(2, bad);  // the snapshot succeeds; the write fails later
    try {
      writer.save(3, make_state(3, rank));
      ADD_FAILURE() << "rank " << rank << ": the failure of step 2 was not reported";
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("checkpoint step 2"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 2"), std::string::npos) << what;
      EXPECT_NE(what.find("'z'"), std::string::npos) << what;
      EXPECT_NE(what.find("previous checkpoint is still the latest"), std::string::npos) << what;
    }
    EXPECT_FALSE(writer.in_flight()) << "a failed save left a save in flight";
    // The writer keeps working: the next save commits.
    writer.save(3, make_state(3, rank));
    ASSERT_TRUE(writer.wait().has_value());
  });
  EXPECT_EQ(list_steps(dir), (std::vector<int64_t>{1, 3}));
  EXPECT_FALSE(fs::exists(step_dir(dir, 2) + "/manifest.json")) << "a failed step was committed";
  test::expect_checkpoint(step_dir(dir, 3), 3, 3);
}

TEST(AsyncCheckpoint, TheDestructorWaitsForTheSaveInFlight) {
  TempDir tmp;
  {
    AsyncCheckpointWriter writer(tmp.path(), std::make_shared<LocalCoordinator>(), {},
                                 AsyncMode::kAsync);
    writer.save(5, make_state(5, 0));
  }
  test::expect_checkpoint(step_dir(tmp.path(), 5), 5, 1);
}

TEST(AsyncCheckpoint, ModesByName) {
  EXPECT_EQ(parse_async_mode("async"), AsyncMode::kAsync);
  EXPECT_EQ(parse_async_mode("async_with_pinned_mem"), AsyncMode::kAsyncWithPinnedMem);
  EXPECT_EQ(parse_async_mode("disabled"), AsyncMode::kDisabled);
  try {
    parse_async_mode("background", "checkpoint.async_mode");
    ADD_FAILURE() << "an unknown mode was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'checkpoint.async_mode' is 'background'"),
              std::string::npos) << e.what();
  }
  TempDir tmp;
  EXPECT_THROW(AsyncCheckpointWriter(tmp.path(), std::make_shared<LocalCoordinator>(), {},
                                     AsyncMode::kDisabled),
               ConfigError);
}

}  // namespace
}  // namespace tessera::checkpoint
