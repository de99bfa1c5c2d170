#include "tessera/runtime/offload/chunked_io.h"

#include <algorithm>
#include <cstring>

#include "tessera/core/check.h"

namespace tessera::runtime::offload {

ChunkedIo::ChunkedIo(const AsyncIoOptions& options) : block_size_(options.block_size) {
  TS_CHECK_T(ConfigError, options.block_size > 0 && options.block_size % kIoAlignment == 0,
             "aio.block_size must be a positive multiple of ", kIoAlignment, " bytes, got ",
             options.block_size);
  TS_CHECK_T(ConfigError, options.queue_depth > 0, "aio.queue_depth must be positive, got ",
             options.queue_depth);
  slots_.resize(static_cast<size_t>(options.queue_depth));
  for (size_t i = slots_.size(); i-- > 0;) free_slots_.push_back(i);
}

AsyncIo::Ticket ChunkedIo::read(int fd, void* buffer, int64_t bytes, int64_t offset,
                                const std::string& what) {
  return submit(false, fd, static_cast<char*>(buffer), bytes, offset, what);
}

AsyncIo::Ticket ChunkedIo::write(int fd, const void* buffer, int64_t bytes, int64_t offset,
                                 const std::string& what) {
  // The engines never write through the pointer of a write request.
  return submit(true, fd, const_cast<char*>(static_cast<const char*>(buffer)), bytes, offset,
                what);
}

AsyncIo::Ticket ChunkedIo::submit(bool is_write, int fd, char* buffer, int64_t bytes,
                                  int64_t offset, const std::string& what) {
  TS_INTERNAL_ASSERT(bytes > 0 && offset >= 0);
  const Ticket ticket = next_ticket_++;
  Request& r = requests_[ticket];
  r.what = what;
  for (int64_t done = 0; done < bytes; done += block_size_) {
    waiting_.push_back({ticket, is_write, fd, buffer + done, std::min(block_size_, bytes - done),
                        offset + done});
    ++r.chunks_left;
  }
  pump();
  return ticket;
}

void ChunkedIo::pump() {
  while (!waiting_.empty() && !free_slots_.empty()) {
    const size_t slot = free_slots_.back();
    free_slots_.pop_back();
    slots_[slot] = waiting_.front();
    waiting_.pop_front();
    ++in_flight_;
    start(slot);
  }
}

void ChunkedIo::reap_some() {
  std::vector<Done> done;
  reap(done);
  for (const Done& d : done) {
    const Chunk c = slots_[d.slot];
    free_slots_.push_back(d.slot);
    --in_flight_;
    Request& r = requests_.at(c.ticket);
    --r.chunks_left;
    if (d.result > 0) (c.is_write ? counters_.written_bytes : counters_.read_bytes) += d.result;
    if (!r.error.empty()) continue;
    const char* op = c.is_write ? "write" : "read";
    if (d.result < 0) {
      r.error = c10::str(op, " of ", c.bytes, " bytes at offset ", c.offset, " of ", r.what,
                         " failed: ", std::strerror(static_cast<int>(-d.result)));
    } else if (d.result != c.bytes) {
      r.error = c10::str("short ", op, " of ", r.what, " at offset ", c.offset, ": ", d.result,
                         " of ", c.bytes, " bytes (is the file truncated or the disk full?)");
    }
  }
  pump();
}

void ChunkedIo::finish(Ticket ticket) {
  auto it = requests_.find(ticket);
  if (it == requests_.end()) return;
  while (it->second.chunks_left > 0) {
    TS_INTERNAL_ASSERT(in_flight_ > 0, "a ticket waits for chunks that were never started");
    reap_some();
  }
  const std::string error = std::move(it->second.error);
  requests_.erase(it);
  TS_CHECK(error.empty(), "offload I/O: ", error);
}

void ChunkedIo::wait(Ticket ticket) { finish(ticket); }

void ChunkedIo::wait_all() {
  std::string first;
  while (!requests_.empty()) {
    try {
      finish(requests_.begin()->first);
    } catch (const Error& e) {
      if (first.empty()) first = e.bare_message();
    }
  }
  TS_CHECK(first.empty(), first);
}

void ChunkedIo::drain() noexcept {
  try {
    waiting_.clear();
    while (in_flight_ > 0) reap_some();
  } catch (...) {
  }
  requests_.clear();
}

}  // namespace tessera::runtime::offload
