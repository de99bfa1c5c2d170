#include "tessera/core/parallel_chunks.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>

namespace tessera {
namespace {

struct Chunks {
  Chunks(int64_t n, const std::function<void(int64_t)>& w) : count(n), work(w) {}

  const int64_t count;
  const std::function<void(int64_t)>& work;
  std::atomic<int64_t> next{0};
  std::mutex mu;
  std::exception_ptr error;  // the first one, under mu

  // Claims and runs chunks until none is left.
  void drain() {
    for (int64_t c = next.fetch_add(1); c < count; c = next.fetch_add(1)) {
      try {
        work(c);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    }
  }
};

}  // namespace

void parallel_chunks(int64_t count, const std::function<void(int64_t chunk)>& work) {
  if (count <= 0) return;
  const int64_t threads = std::min<int64_t>(count, at::get_num_threads());
  if (threads <= 1 || at::in_parallel_region()) {
    for (int64_t c = 0; c < count; ++c) work(c);
    return;
  }
  Chunks chunks(count, work);
  // One element per thread, grain 1: for_each's at::parallel_for, compiled
  // inside LibTorch with OpenMP, gives every intra-op thread one element.
  at::Tensor slots = at::empty({threads}, at::kByte);
  at::TensorIterator iter = at::TensorIterator::nullary_op(slots);
  iter.for_each([&chunks](char**, const int64_t*, int64_t, int64_t) { chunks.drain(); },
                /*grain_size=*/1);
  if (chunks.error) std::rethrow_exception(chunks.error);
}

}  // namespace tessera
