// Small POSIX file helpers shared by the modules that write files themselves
// (checkpoints, token files). Each caller turns a failure into its own error
// type, so these report errno instead of throwing.
// Stateless; FdGuard is owned by one scope.
#pragma once

#include <cstddef>

namespace tessera::core {

// Closes a file descriptor when the scope ends (fd < 0: nothing to close).
struct FdGuard {
  int fd = -1;
  FdGuard() = default;
  explicit FdGuard(int f) : fd(f) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  ~FdGuard();
};

// Writes all `size` bytes of `data`, retrying short writes and EINTR.
// Returns 0, or the errno of the write that failed.
int write_fully(int fd, const void* data, size_t size);

}  // namespace tessera::core
