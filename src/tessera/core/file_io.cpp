#include "tessera/core/file_io.h"

#include <unistd.h>

#include <cerrno>

namespace tessera::core {

FdGuard::~FdGuard() {
  if (fd >= 0) ::close(fd);
}

int write_fully(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace tessera::core
