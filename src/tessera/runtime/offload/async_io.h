// AsyncIo: direct, asynchronous reads and writes of the offload swap files, the
// way DeepSpeed's async_io streams ZeRO-Infinity's state through libaio.
//
// A request moves `bytes` between `buffer` and a file at `offset`. Files opened
// with O_DIRECT (swap_file.h) bypass the page cache, so the buffer address, the
// offset and the length must be multiples of kIoAlignment. read()/write() queue
// the request and return a ticket at once; wait(ticket) blocks until it is done
// and throws an Error naming the file, offset and cause if it failed or moved
// fewer bytes. A request larger than block_size is split into block_size pieces,
// at most queue_depth of them in flight (DeepSpeed's aio.block_size and
// aio.queue_depth).
//
// Two engines:
//   uring  io_uring through liburing: the kernel performs the transfers while the
//          caller computes; no thread of ours.
//   posix  pread/pwrite on one background thread, for kernels or containers where
//          io_uring is unavailable (Docker's default seccomp profile blocks it).
// TESSERA_AIO selects one (auto, the default: uring when the kernel allows it).
//
// Thread safety: none. One thread (the training thread) submits and waits; the
// posix engine's own thread only touches its queue.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tessera::runtime::offload {

// Alignment of O_DIRECT buffers, offsets and lengths (the logical block size of
// every disk in common use; 4 KiB also covers 4Kn drives).
inline constexpr int64_t kIoAlignment = 4096;

// `n` rounded up to a multiple of `to` (> 0): O_DIRECT lengths and offsets.
inline constexpr int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

struct AsyncIoOptions {
  int64_t block_size = 1 << 20;  // bytes per request to the kernel
  int queue_depth = 8;           // requests in flight at once
  std::string engine = "auto";   // auto | uring | posix
};

// Bytes moved by completed transfers (what the offload benchmarks report).
struct IoCounters {
  int64_t read_bytes = 0;
  int64_t written_bytes = 0;
};

class AsyncIo {
 public:
  using Ticket = uint64_t;
  virtual ~AsyncIo() = default;

  // Queue a transfer; `what` names the file in errors. The buffer must stay
  // alive and untouched until wait() returns for this ticket.
  virtual Ticket read(int fd, void* buffer, int64_t bytes, int64_t offset,
                      const std::string& what) = 0;
  virtual Ticket write(int fd, const void* buffer, int64_t bytes, int64_t offset,
                       const std::string& what) = 0;
  // Blocks until the ticket's transfer is complete; throws Error if it failed.
  // Waiting for a ticket already waited for returns at once.
  virtual void wait(Ticket ticket) = 0;
  // Waits for every queued transfer; throws the first failure.
  virtual void wait_all() = 0;
  // "uring" or "posix".
  virtual const char* engine() const = 0;
  virtual const IoCounters& counters() const = 0;
};

// The engine `options.engine` names (auto: uring if io_uring_queue_init works,
// else posix with one INFO line saying why). ConfigError for an unknown engine,
// or for "uring" where the kernel refuses it or the build lacks liburing.
std::unique_ptr<AsyncIo> make_async_io(AsyncIoOptions options);

}  // namespace tessera::runtime::offload
