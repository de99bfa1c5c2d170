// Injected checkpoint faults: every kind of damage to the newest checkpoint is a
// CheckpointError naming the damaged file, and the previous checkpoint stays
// loadable. A save that fails on one rank commits nothing on any rank.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "checkpoint_test_util.h"
#include "tessera/checkpoint/tensor_file.h"
#include "tessera/core/error.h"
#include "testing/thread_ranks.h"

namespace tessera::checkpoint {
namespace {

namespace fs = std::filesystem;
using test::make_state;
using test::TempDir;

void save_two_steps(const std::string& dir, int world) {
  testing::run_ranks(world, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    CheckpointWriter writer(dir, std::make_shared<StoreCoordinator>(store, rank, size));
    writer.save(1, make_state(1, rank));
    writer.save(2, make_state(2, rank));
  });
}

void flip_byte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x10));
}

struct Fault {
  const char* name;
  const char* file;     // the file the error must name
  const char* problem;  // a word the error must contain
  std::function<void(const std::string& sdir)> inject;
};

TEST(CheckpointFaults, DamageIsDetectedAndThePreviousStepLoads) {
  const std::vector<Fault> faults = {
      {"truncate", "replicated.tsr", "truncated",
       [](const std::string& d) {
         fs::resize_file(d + "/replicated.tsr", fs::file_size(d + "/replicated.tsr") - 3);
       }},
      {"flip data byte", "rank_00001.tsr", "corrupted",
       [](const std::string& d) {
         flip_byte(d + "/rank_00001.tsr",
                   static_cast<int64_t>(fs::file_size(d + "/rank_00001.tsr")) - 1);
       }},
      {"flip header byte", "replicated.tsr", "corrupted",
       [](const std::string& d) { flip_byte(d + "/replicated.tsr", 20); }},
      {"delete manifest", "manifest.json", "incomplete",
       [](const std::string& d) { fs::remove(d + "/manifest.json"); }},
      {"delete rank file", "rank_00000.tsr", "missing",
       [](const std::string& d) { fs::remove(d + "/rank_00000.tsr"); }},
      {"edit manifest value", "manifest.json", "corrupted",
       [](const std::string& d) {
         std::string text = read_file_bytes(d + "/manifest.json");
         auto pos = text.find("0.1");
         ASSERT_NE(pos, std::string::npos);
         text[pos + 2] = '2';  // "lr": 0.1 -> 0.2, still valid JSON
         std::ofstream(d + "/manifest.json", std::ios::trunc) << text;
       }},
      {"garbage manifest", "manifest.json", "not valid JSON",
       [](const std::string& d) { std::ofstream(d + "/manifest.json") << "{\"format\": tess"; }},
  };
  for (const auto& fault : faults) {
    SCOPED_TRACE(fault.name);
    TempDir tmp;
    save_two_steps(tmp.path(), 2);
    const std::string newest = step_dir(tmp.path(), 2);
    fault.inject(newest);
    try {
      CheckpointReader::open(newest);
      ADD_FAILURE() << "damage not detected";
    } catch (const CheckpointError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(fault.file), std::string::npos) << msg;
      EXPECT_NE(msg.find(fault.problem), std::string::npos) << msg;
    }
    auto latest = latest_checkpoint(tmp.path());
    ASSERT_TRUE(latest.has_value());
    EXPECT_EQ(*latest, step_dir(tmp.path(), 1));
    test::expect_checkpoint(*latest, 1, 2);
  }
}

TEST(CheckpointFaults, ADirectoryARankCannotSeeFailsTheFirstSaveOnEveryRank) {
  TempDir tmp;
  const std::string shared = tmp.path() + "/shared";
  // Rank 2 writes "the same path" on a disk of its own, as on a host without
  // the shared filesystem.
  const std::string own_disk = tmp.path() + "/rank2_disk";
  testing::run_ranks(3, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    CheckpointWriter writer(rank == 2 ? own_disk : shared,
                            std::make_shared<StoreCoordinator>(store, rank, size));
    try {
      writer.save(1, make_state(1, rank));
      ADD_FAILURE() << "rank " << rank << ": the save should fail";
    } catch (const CheckpointError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("is not shared between the job's hosts: rank 2 on "), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("nothing was saved"), std::string::npos) << msg;
    }
  });
  EXPECT_FALSE(fs::exists(shared + "/latest"));
  EXPECT_FALSE(fs::exists(step_dir(shared, 1)));
  EXPECT_FALSE(fs::exists(step_dir(own_disk, 1)));
  // The probe file is gone again.
  EXPECT_TRUE(fs::is_empty(shared));
}

TEST(CheckpointFaults, FailedSaveOnOneRankCommitsNothing) {
  TempDir tmp;
  const std::string dir = tmp.path();
  testing::run_ranks(3, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    CheckpointWriter writer(dir, std::make_shared<StoreCoordinator>(store, rank, size));
    writer.save(1, make_state(1, rank));
    CheckpointState bad = make_state(2, rank);
    // Complex tensors are not a checkpoint dtype: rank 2's write fails.
    if (rank == 2) bad.per_rank.emplace_back("z", at::zeros({2}, at::kComplexFloat));
    try {
      writer.save(2, bad);
      ADD_FAILURE() << "rank " << rank << ": save of step 2 should fail";
    } catch (const CheckpointError& e) {
      // Every rank learns which rank failed and why.
      EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'z'"), std::string::npos) << e.what();
    }
    // A retry of the same step then succeeds.
    writer.save(2, make_state(2, rank));
  });
  test::expect_checkpoint(step_dir(dir, 2), 2, 3);
}

TEST(CheckpointFaults, CrashBeforeCommitLeavesLatestOnThePreviousStep) {
  TempDir tmp;
  const std::string dir = tmp.path();
  save_two_steps(dir, 2);
  // Simulate a crash during step 3: rank files written, no manifest, no pointer.
  fs::create_directories(step_dir(dir, 3));
  fs::copy_file(step_dir(dir, 2) + "/rank_00000.tsr", step_dir(dir, 3) + "/rank_00000.tsr");
  std::ifstream pointer(dir + "/latest");
  std::string name;
  pointer >> name;
  EXPECT_EQ(name, "step_2");
  EXPECT_EQ(list_steps(dir), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(latest_checkpoint(dir), step_dir(dir, 2));
  EXPECT_THROW(CheckpointReader::open(step_dir(dir, 3)), CheckpointError);
}

TEST(CheckpointFaults, ManifestMismatchedWithFiles) {
  TempDir tmp;
  const std::string dir = tmp.path();
  save_two_steps(dir, 2);
  // Step 1's rank file swapped into step 2: size or checksum no longer match.
  fs::copy_file(step_dir(dir, 1) + "/rank_00001.tsr", step_dir(dir, 2) + "/rank_00001.tsr",
                fs::copy_options::overwrite_existing);
  try {
    CheckpointReader::open(step_dir(dir, 2));
    ADD_FAILURE() << "swapped file not detected";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("rank_00001.tsr"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::checkpoint
