// SwapSpace: one rank's directory of offload swap files under nvme_path, and the
// asynchronous I/O engine that moves them.
//
//   <nvme_path>/tessera-offload/<host>-pid<pid>-rank<r>/<file>
//
// The constructor checks the disk before anything is written: nvme_path must be
// an existing, writable directory with room for `reserve_bytes` (a ConfigError
// naming the path, the bytes needed and the bytes free otherwise). Directories
// left behind on this host by processes that no longer run (a job killed with
// SIGKILL) are removed first. The destructor removes the directory with every
// file in it, so a job leaves nothing behind when it exits or unwinds.
// Not thread-safe; owned by the offload of one engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/runtime/offload/async_io.h"
#include "tessera/runtime/offload/swap_file.h"

namespace tessera::runtime::offload {

class SwapSpace {
 public:
  SwapSpace(const std::string& nvme_path, int rank, int64_t reserve_bytes,
            const AsyncIoOptions& io_options);
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  // A new file `name` of `bytes` bytes in this rank's directory.
  std::unique_ptr<SwapFile> create(const std::string& name, int64_t bytes);
  AsyncIo& io() { return *io_; }
  const AsyncIo& io() const { return *io_; }
  const std::string& dir() const { return dir_; }
  // The space a file of `bytes` bytes takes on disk (rounded up).
  static int64_t disk_bytes(int64_t bytes) {
    return (bytes + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
  }

 private:
  std::string dir_;
  std::unique_ptr<AsyncIo> io_;
};

// Removes <nvme_path>/tessera-offload/<host>-pid<P>-rank*/ for every P that is not
// a running process on this host; returns how many it removed.
int remove_stale_swap_dirs(const std::string& nvme_path);

}  // namespace tessera::runtime::offload
