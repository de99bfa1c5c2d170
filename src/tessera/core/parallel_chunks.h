// Fork-join on LibTorch's intra-op threads, for code built without OpenMP.
//
// at::parallel_for is a header template whose parallel region is an OpenMP
// pragma compiled into the caller. Tessera is built without -fopenmp (LibTorch's
// libgomp stays the process's only OpenMP runtime), so in Tessera's own code
// at::parallel_for runs its whole range on the calling thread. parallel_chunks
// enters LibTorch's parallel region from inside LibTorch instead:
// TensorIterator::for_each over a one-byte-per-thread tensor, which runs one
// element on each of at::get_num_threads() intra-op threads (OMP_NUM_THREADS,
// at::set_num_threads); each of them then claims chunks of the caller's work
// from a shared counter until none is left. The threads are the ones LibTorch's
// own ops just used (no wake-up from sleep, unlike the inter-op pool), and a
// thread the OS deschedules on a shared host delays only the chunk it holds.
// Code called inside runs in an OpenMP parallel region, so MKL and LibTorch ops
// there stay on their thread.
//
// With one thread, or when already inside a parallel region, the chunks run in
// order on the caller. The first exception a chunk throws reaches the caller
// after every chunk has finished.
#pragma once

#include <cstdint>
#include <functional>

namespace tessera {

// Calls work(c) once for every c in [0, count), from up to at::get_num_threads()
// threads; returns when all calls have returned. Blocking.
void parallel_chunks(int64_t count, const std::function<void(int64_t chunk)>& work);

}  // namespace tessera
