// Algorithms the gloo backend runs itself on Gloo's unbound buffers, where Gloo
// has none that fits: a ring reduce-scatter with per-rank counts, and the slot
// numbers that keep them apart from Gloo's own collectives and from p2p tags.
// Blocking; called from the backend's collective thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

#include "tessera/comm/gloo/gloo_dtype.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}
}  // namespace gloo

namespace tessera::comm {

// Gloo builds its slots as (prefix << 56 | tag << 24) with prefixes 0x01-0x08;
// ours use prefixes above those so they can never collide.
constexpr uint8_t kGlooReduceScatterPrefix = 0x20;
constexpr uint8_t kGlooP2pPrefix = 0x21;
inline uint64_t gloo_slot(uint8_t prefix, uint32_t tag) {
  return (static_cast<uint64_t>(prefix) << 56) | (static_cast<uint64_t>(tag) << 24);
}

// The unbound buffers this backend is currently waiting on, so that abort() from
// another thread can wake those waits (Gloo then returns false from
// waitRecv/waitSend). Once aborted, buffers added later are woken at once.
// Thread-safe.
class GlooActiveBuffers {
 public:
  void add(::gloo::transport::UnboundBuffer* buffer);
  void remove(::gloo::transport::UnboundBuffer* buffer);
  void abort_all();

  // Registers a buffer for the lifetime of the guard.
  class Guard {
   public:
    Guard(GlooActiveBuffers* set, ::gloo::transport::UnboundBuffer* buffer)
        : set_(set), buffer_(buffer) {
      if (set_) set_->add(buffer_);
    }
    ~Guard() {
      if (set_) set_->remove(buffer_);
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    GlooActiveBuffers* set_;
    ::gloo::transport::UnboundBuffer* buffer_;
  };

 private:
  std::mutex mu_;
  std::set<::gloo::transport::UnboundBuffer*> buffers_;
  bool aborted_ = false;
};

// Ring reduce-scatter in place over `work` (sum(counts) elements of elem_size
// bytes, this rank's full input): after size-1 steps, each sending one chunk to
// the right neighbour and reducing the chunk received from the left, chunk
// rank() of `work` holds the reduction over all ranks. Sends (n-1)/n of the data
// per rank, the minimum. Zero-sized chunks are skipped on both sides.
// Throws gloo's exceptions (wrap the call with TS_GLOO_CALL), and CommError when
// `active` was aborted.
void gloo_ring_reduce_scatter(::gloo::Context& context, uint64_t slot, void* work,
                              const std::vector<int64_t>& counts, size_t elem_size,
                              const GlooReduceFn& reduce, std::chrono::milliseconds timeout,
                              GlooActiveBuffers* active);

}  // namespace tessera::comm
