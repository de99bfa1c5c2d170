#include "tessera/runtime/offload/swap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tessera/core/check.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/offload/aligned_buffer.h"

namespace tessera::runtime::offload {

SwapFile::SwapFile(std::string path, int64_t bytes)
    : path_(std::move(path)), bytes_(bytes), allocated_(round_up(std::max<int64_t>(bytes, 1), kIoAlignment)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
  if (fd_ < 0 && errno == EINVAL) {
    // tmpfs and some network filesystems refuse O_DIRECT: buffered I/O still works.
    static bool warned = false;
    if (!warned) {
      TS_LOG(WARN) << "offload: " << path_ << " is on a filesystem without O_DIRECT; swap files "
                   << "go through the page cache (more memory, same results)";
      warned = true;
    }
    direct_ = false;
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  }
  TS_CHECK(fd_ >= 0, "offload: cannot create swap file ", path_, ": ", std::strerror(errno),
           "; check that nvme_path exists and is writable");
  const int rc = ::posix_fallocate(fd_, 0, allocated_);
  if (rc != 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
    TS_THROW(Error, "offload: cannot allocate ", allocated_, " bytes for swap file ", path_, ": ",
             std::strerror(rc), rc == ENOSPC ? " (the disk is full; free space or point nvme_path "
                                               "at a larger disk)" : "");
  }
}

SwapFile::~SwapFile() {
  if (fd_ < 0) return;  // moved into another file by replace_with()
  ::close(fd_);
  ::unlink(path_.c_str());
}

AsyncIo::Ticket SwapFile::read(AsyncIo& io, void* buffer, int64_t offset, int64_t bytes) const {
  TS_INTERNAL_ASSERT(offset % kIoAlignment == 0 && offset + bytes <= allocated_);
  return io.read(fd_, buffer, round_up(bytes, kIoAlignment), offset, path_);
}

AsyncIo::Ticket SwapFile::write(AsyncIo& io, const void* buffer, int64_t offset,
                                int64_t bytes) const {
  TS_INTERNAL_ASSERT(offset % kIoAlignment == 0 && offset + bytes <= allocated_);
  return io.write(fd_, buffer, round_up(bytes, kIoAlignment), offset, path_);
}

at::Tensor SwapFile::map(at::ScalarType dtype) const {
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
  void* base = ::mmap(nullptr, static_cast<size_t>(allocated_), PROT_READ, MAP_SHARED, fd_, 0);
  TS_CHECK(base != MAP_FAILED, "offload: cannot map swap file ", path_, ": ", std::strerror(errno));
  const size_t length = static_cast<size_t>(allocated_);
  return at::from_blob(
      base, {bytes_ / element}, [length](void* p) { ::munmap(p, length); },
      at::TensorOptions().dtype(dtype));
}

void SwapFile::store(AsyncIo& io, const at::Tensor& values) const {
  TS_INTERNAL_ASSERT(values.is_contiguous() && values.nbytes() == static_cast<size_t>(bytes_));
  constexpr int64_t kStaging = 8 << 20;
  AlignedBuffer staging(std::min<int64_t>(kStaging, allocated_));
  const char* src = static_cast<const char*>(values.data_ptr());
  for (int64_t off = 0; off < bytes_; off += staging.bytes()) {
    const int64_t n = std::min(staging.bytes(), bytes_ - off);
    std::memcpy(staging.data(), src + off, static_cast<size_t>(n));
    // The rounded-up tail writes zeros past the tensor: padding of the file.
    std::memset(static_cast<char*>(staging.data()) + n, 0,
                static_cast<size_t>(round_up(n, kIoAlignment) - n));
    io.wait(write(io, staging.data(), off, n));
  }
}

void SwapFile::replace_with(SwapFile&& other) {
  TS_INTERNAL_ASSERT(other.allocated_ == allocated_ && other.fd_ >= 0);
  TS_CHECK(::rename(other.path_.c_str(), path_.c_str()) == 0, "offload: cannot rename ",
           other.path_, " to ", path_, ": ", std::strerror(errno));
  ::close(fd_);
  fd_ = other.fd_;
  direct_ = other.direct_;
  other.fd_ = -1;
}

}  // namespace tessera::runtime::offload
