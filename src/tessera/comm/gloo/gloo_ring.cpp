#include "tessera/comm/gloo/gloo_ring.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <memory>

#include "tessera/core/check.h"

namespace tessera::comm {

void GlooActiveBuffers::add(::gloo::transport::UnboundBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.insert(buffer);
  if (aborted_) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

void GlooActiveBuffers::remove(::gloo::transport::UnboundBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.erase(buffer);
}

void GlooActiveBuffers::abort_all() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  for (auto* b : buffers_) {
    b->abortWaitRecv();
    b->abortWaitSend();
  }
}

void gloo_ring_reduce_scatter(::gloo::Context& context, uint64_t slot, void* work,
                              const std::vector<int64_t>& counts, size_t elem_size,
                              const GlooReduceFn& reduce, std::chrono::milliseconds timeout,
                              GlooActiveBuffers* active) {
  const int n = context.size;
  const int r = context.rank;
  std::vector<size_t> offset(n), bytes(n);
  size_t total = 0, largest = 0;
  for (int i = 0; i < n; ++i) {
    offset[i] = total;
    bytes[i] = static_cast<size_t>(counts[i]) * elem_size;
    total += bytes[i];
    largest = std::max(largest, bytes[i]);
  }
  if (total == 0) return;
  auto* base = static_cast<uint8_t*>(work);
  std::unique_ptr<uint8_t[]> scratch(new uint8_t[std::max<size_t>(largest, 1)]);
  auto acc = context.createUnboundBuffer(base, total);
  auto tmp = context.createUnboundBuffer(scratch.get(), std::max<size_t>(largest, 1));
  GlooActiveBuffers::Guard acc_guard(active, acc.get());
  GlooActiveBuffers::Guard tmp_guard(active, tmp.get());
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  for (int step = 0; step < n - 1; ++step) {
    // The chunk sent now is the one reduced in the previous step; after the last
    // step the chunk reduced is our own (index r).
    const int send_idx = (r - 1 - step + 2 * n) % n;
    const int recv_idx = (r - 2 - step + 2 * n) % n;
    if (bytes[recv_idx] > 0) tmp->recv(left, slot, 0, bytes[recv_idx]);
    if (bytes[send_idx] > 0) acc->send(right, slot, offset[send_idx], bytes[send_idx]);
    if (bytes[recv_idx] > 0) {
      TS_CHECK_T(CommError, tmp->waitRecv(timeout),
                 "gloo reduce_scatter was aborted: the group is being torn down");
      uint8_t* chunk = base + offset[recv_idx];
      reduce(chunk, chunk, scratch.get(), static_cast<size_t>(counts[recv_idx]));
    }
    if (bytes[send_idx] > 0) {
      TS_CHECK_T(CommError, acc->waitSend(timeout),
                 "gloo reduce_scatter was aborted: the group is being torn down");
    }
  }
}

}  // namespace tessera::comm
