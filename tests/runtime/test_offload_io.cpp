// The offload's I/O layer on its own: both AsyncIo engines move bytes exactly
// (split into many requests, more than the queue holds), report failures with
// the file and the cause, and SwapSpace checks the disk, cleans up after dead
// processes and removes its files.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/runtime/offload/aligned_buffer.h"
#include "tessera/runtime/offload/async_io.h"
#include "tessera/runtime/offload/swap_space.h"
#include "testing/files.h"

namespace tessera::runtime::offload {
namespace {

namespace fs = std::filesystem;

class AsyncIoEngines : public ::testing::TestWithParam<std::string> {};

TEST_P(AsyncIoEngines, MovesEveryByteThroughSmallBlocksAndAShallowQueue) {
  tessera::testing::TempDir dir("aio");
  AsyncIoOptions o;
  o.engine = GetParam();
  o.block_size = 8192;  // a 1 MiB transfer is 128 requests
  o.queue_depth = 3;    // more than the queue holds: the rest wait their turn
  auto io = make_async_io(o);
  EXPECT_STREQ(io->engine(), GetParam().c_str());
  SwapSpace space(dir.path(), 0, 0, o);
  auto file = space.create("data", 3 << 20);
  EXPECT_TRUE(file->direct()) << "ext4 and xfs take O_DIRECT";
  const at::Tensor values = at::randn({(3 << 20) / 4});
  file->store(*io, values);
  // Read it back in three pieces at different offsets, all in flight at once.
  AlignedBuffer buffer(3 << 20);
  std::vector<AsyncIo::Ticket> tickets;
  for (int k = 2; k >= 0; --k) {
    const int64_t off = static_cast<int64_t>(k) << 20;
    tickets.push_back(file->read(*io, static_cast<char*>(buffer.data()) + off, off, 1 << 20));
  }
  for (auto t : tickets) io->wait(t);
  io->wait(tickets[0]);  // waiting again returns at once
  EXPECT_TRUE(at::equal(buffer.view(0, values.numel(), at::kFloat), values));
  EXPECT_EQ(io->counters().read_bytes, 3 << 20);
  EXPECT_EQ(io->counters().written_bytes, 3 << 20);
  // The mapping sees what was written.
  EXPECT_TRUE(at::equal(file->map(at::kFloat), values));
}

TEST_P(AsyncIoEngines, AFailedTransferNamesTheFileAndTheCause) {
  tessera::testing::TempDir dir("aio_err");
  AsyncIoOptions o;
  o.engine = GetParam();
  auto io = make_async_io(o);
  const std::string path = dir.path() + "/short";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  AlignedBuffer buffer(8192);
  // Past the end of a 4 KiB file: a short read.
  try {
    io->wait(io->read(fd, buffer.data(), 8192, 0, path));
    ADD_FAILURE() << "a short read went unnoticed";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("short read"), std::string::npos) << what;
  }
  ::close(fd);
  // A closed descriptor: the system's own reason.
  try {
    io->wait(io->write(fd, buffer.data(), 4096, 0, path));
    ADD_FAILURE() << "a write to a closed descriptor went unnoticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Bad file descriptor"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, AsyncIoEngines, ::testing::Values("uring", "posix"));

TEST(SwapSpace, RefusesAMissingDirectoryAndADiskTooSmallBeforeWritingAnything) {
  tessera::testing::TempDir dir("swap_space");
  const std::string missing = dir.path() + "/no/such/disk";
  try {
    SwapSpace space(missing, 0, 0, {});
    ADD_FAILURE() << "a missing nvme_path was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not an existing directory"), std::string::npos);
  }
  try {
    SwapSpace space(dir.path(), 3, int64_t{1} << 60, {});  // an exabyte
    ADD_FAILURE() << "an impossible reservation was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("are free"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.path() + "/tessera-offload/" )
               && !fs::is_empty(dir.path() + "/tessera-offload/"))
      << "nothing may be left after a refused start";
}

TEST(SwapSpace, RemovesItsFilesAndWhatDeadProcessesLeftBehind) {
  tessera::testing::TempDir dir("swap_stale");
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  // A directory of a process that no longer exists (pid_max is far below this),
  // and one of this (live) process, which must stay.
  const std::string dead = dir.path() + "/tessera-offload/" + host + "-pid999999999-rank0";
  const std::string live = dir.path() + "/tessera-offload/" + host + "-pid" +
                           std::to_string(::getpid()) + "-rank7";
  fs::create_directories(dead);
  fs::create_directories(live);
  std::string mine;
  {
    SwapSpace space(dir.path(), 1, 1 << 20, {});
    mine = space.dir();
    auto f = space.create("x", 1 << 20);
    EXPECT_TRUE(fs::exists(mine + "/x"));
    EXPECT_FALSE(fs::exists(dead)) << "the dead process's swap directory is still there";
    EXPECT_TRUE(fs::exists(live));
  }
  EXPECT_FALSE(fs::exists(mine)) << "the swap directory outlived its SwapSpace";

  // A process killed a moment ago and not reaped yet (a zombie) counts as gone.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  for (int i = 0; i < 200; ++i) {
    const std::string stat = tessera::testing::read_text_file("/proc/" + std::to_string(child) + "/stat");
    if (stat.find(") Z") != std::string::npos) break;
    ::usleep(10000);
  }
  const std::string zombie = dir.path() + "/tessera-offload/" + host + "-pid" + std::to_string(child) + "-rank1";
  fs::create_directories(zombie);
  EXPECT_EQ(remove_stale_swap_dirs(dir.path()), 1);
  EXPECT_FALSE(fs::exists(zombie));
  EXPECT_TRUE(fs::exists(live));
  ::waitpid(child, nullptr, 0);
}

}  // namespace
}  // namespace tessera::runtime::offload
