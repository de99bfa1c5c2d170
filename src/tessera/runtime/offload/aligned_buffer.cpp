#include "tessera/runtime/offload/aligned_buffer.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <utility>

#include "tessera/core/check.h"
#include "tessera/runtime/offload/async_io.h"

namespace tessera::runtime::offload {

AlignedBuffer::AlignedBuffer(int64_t bytes)
    : bytes_((std::max<int64_t>(bytes, 1) + kIoAlignment - 1) / kIoAlignment * kIoAlignment) {
  const int rc = ::posix_memalign(&data_, static_cast<size_t>(kIoAlignment),
                                  static_cast<size_t>(bytes_));
  TS_CHECK(rc == 0, "offload: cannot allocate an I/O buffer of ", bytes_, " bytes; lower "
           "offload_optimizer/offload_param buffer_size or buffer_count");
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

at::Tensor AlignedBuffer::view(int64_t offset, int64_t numel, at::ScalarType dtype) const {
  TS_INTERNAL_ASSERT(offset + numel * static_cast<int64_t>(c10::elementSize(dtype)) <= bytes_);
  return at::from_blob(static_cast<char*>(data_) + offset, {numel},
                       at::TensorOptions().dtype(dtype));
}

}  // namespace tessera::runtime::offload
