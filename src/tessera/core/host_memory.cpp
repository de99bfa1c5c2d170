#include "tessera/core/host_memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "tessera/core/env.h"

namespace tessera {
namespace {
// glibc refuses mmap thresholds above half its heap size: 32 MiB on 64-bit.
constexpr int kMmapThresholdBytes = 32 << 20;
constexpr int kTrimThresholdBytes = 1 << 30;
}  // namespace

HostMemoryPolicy configure_host_memory() {
  HostMemoryPolicy policy;
  if (!env::get_bool("TESSERA_HOST_MEMORY_CACHE")) {
    policy.description = "C library defaults (TESSERA_HOST_MEMORY_CACHE=0)";
    return policy;
  }
#if defined(__GLIBC__)
  // Setting either threshold also turns off glibc's dynamic adjustment of both.
  const bool mmap_set = mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) == 1;
  const bool trim_set = mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes) == 1;
  policy.cache_enabled = mmap_set && trim_set;
  policy.description = policy.cache_enabled
                           ? "freed memory kept for reuse (mmap threshold 32 MiB, trim 1 GiB)"
                           : "glibc refused the malloc thresholds; C library defaults";
#else
  policy.description = "not glibc: C library defaults";
#endif
  return policy;
}

void release_free_host_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace tessera
