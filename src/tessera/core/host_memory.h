// Host memory policy of a training process: keep freed memory for reuse.
//
// A training step allocates and frees the same activation and gradient buffers
// every iteration. With glibc's defaults, buffers above the (dynamic) mmap
// threshold are mapped and unmapped per step, and freed memory at the top of the
// heap is returned to the kernel whenever it exceeds the trim threshold; the next
// step then faults every page in again and the kernel zeroes it. On the reference
// GPT this is 1,300 page faults and ~7% of a CPU step.
//
// configure_host_memory() (called by tessera::init()) fixes the mmap threshold at
// its glibc maximum (32 MiB) and the trim threshold at 1 GiB, so buffers up to
// 32 MiB are recycled from the heap. The cost is that the process keeps its peak
// heap instead of shrinking between steps, which a training job reaches every
// step anyway. TESSERA_HOST_MEMORY_CACHE=0 leaves the C library's defaults.
#pragma once

#include <string>

namespace tessera {

struct HostMemoryPolicy {
  bool cache_enabled = false;  // the thresholds above are in effect
  std::string description;     // one line for logs and `tessera doctor`
};

// Applies TESSERA_HOST_MEMORY_CACHE (default 1) to this process's allocator.
// Idempotent and cheap; safe to call before or after tensors exist. Without
// glibc, or with the variable at 0, it changes nothing and says so.
HostMemoryPolicy configure_host_memory();

// Returns the heap's free memory to the kernel now (glibc's malloc_trim), for the
// rare moment a process has freed much memory it will not need again: the nvme
// offload after moving the parameter shards of a model built whole to disk.
// The policy above would otherwise keep those pages resident. No-op elsewhere.
void release_free_host_memory();

}  // namespace tessera
