// What MemoryStats (engine.h) is counted from: tensors' storages, each storage
// once however many tensors view it, and the process's peak resident set.
#pragma once

#include <ATen/core/Tensor.h>
#include <sys/resource.h>

#include <cstdint>
#include <unordered_set>

namespace tessera::runtime {

class StorageBytes {
 public:
  // The bytes of t's storage the first time it is seen, 0 afterwards (and for
  // undefined or storage-less tensors).
  int64_t operator()(const at::Tensor& t) {
    if (!t.defined() || !t.has_storage()) return 0;
    return seen_.insert(t.storage().unsafeGetStorageImpl()).second
               ? static_cast<int64_t>(t.storage().nbytes())
               : 0;
  }
  // Counts t's storage as seen without adding it.
  void skip(const at::Tensor& t) {
    if (t.defined() && t.has_storage()) seen_.insert(t.storage().unsafeGetStorageImpl());
  }

 private:
  std::unordered_set<const c10::StorageImpl*> seen_;
};

// getrusage's ru_maxrss of this process, in bytes (0 if unavailable).
inline int64_t peak_rss_bytes() {
  struct rusage usage {};
  return ::getrusage(RUSAGE_SELF, &usage) == 0 ? int64_t{usage.ru_maxrss} * 1024 : 0;
}

}  // namespace tessera::runtime
