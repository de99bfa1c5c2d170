// ChunkedIo: the bookkeeping both AsyncIo engines share (async_io.h). A request is
// split into chunks of at most block_size bytes; a ticket is done when all its
// chunks are; at most queue_depth chunks are with the engine at once, the rest
// wait in order. An engine implements start() (hand one chunk to the kernel or
// the worker thread) and reap() (collect finished chunks, blocking for at least
// one).
// Thread safety: none (the owner thread); reap() implementations synchronize
// with their own worker if they have one.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/runtime/offload/async_io.h"

namespace tessera::runtime::offload {

class ChunkedIo : public AsyncIo {
 public:
  explicit ChunkedIo(const AsyncIoOptions& options);

  Ticket read(int fd, void* buffer, int64_t bytes, int64_t offset,
              const std::string& what) override;
  Ticket write(int fd, const void* buffer, int64_t bytes, int64_t offset,
               const std::string& what) override;
  void wait(Ticket ticket) override;
  void wait_all() override;
  const IoCounters& counters() const override { return counters_; }

 protected:
  struct Chunk {
    Ticket ticket = 0;
    bool is_write = false;
    int fd = -1;
    char* buffer = nullptr;
    int64_t bytes = 0;
    int64_t offset = 0;
  };
  // The kernel's (or the worker's) answer for one chunk: bytes moved, or -errno.
  struct Done {
    size_t slot = 0;
    int64_t result = 0;
  };

  // Hands chunk `slot` (an index into chunk(), stable until its Done) to the engine.
  virtual void start(size_t slot) = 0;
  // Appends the chunks that finished; blocks until at least one has when
  // nothing is finished yet. Only called with chunks in flight.
  virtual void reap(std::vector<Done>& out) = 0;

  const Chunk& chunk(size_t slot) const { return slots_[slot]; }
  // For the engines' destructors: waits for everything in flight, ignoring
  // failures (the buffers may be freed right after).
  void drain() noexcept;

 private:
  struct Request {
    int64_t chunks_left = 0;
    std::string what;   // the file, for errors
    std::string error;  // the first failure, "" if none
  };
  Ticket submit(bool is_write, int fd, char* buffer, int64_t bytes, int64_t offset,
                const std::string& what);
  void pump();          // starts waiting chunks while slots are free
  void reap_some();     // one reap() round, accounting for what finished
  void finish(Ticket ticket);

  int64_t block_size_;
  std::vector<Chunk> slots_;
  std::vector<size_t> free_slots_;
  std::deque<Chunk> waiting_;
  std::unordered_map<Ticket, Request> requests_;
  IoCounters counters_;
  Ticket next_ticket_ = 1;
  size_t in_flight_ = 0;
};

}  // namespace tessera::runtime::offload
