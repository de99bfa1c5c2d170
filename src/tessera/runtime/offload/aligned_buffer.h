// AlignedBuffer: host memory aligned for O_DIRECT transfers (kIoAlignment), the
// unit of the offload buffer pools. Its bytes are counted by the offload's
// memory statistics, not by LibTorch's allocator.
// Move-only; not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace tessera::runtime::offload {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // `bytes` rounded up to kIoAlignment; the memory is not initialized.
  explicit AlignedBuffer(int64_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  // `numel` elements of `dtype` at byte `offset`, as a tensor that does not own
  // the memory (valid while the buffer lives).
  at::Tensor view(int64_t offset, int64_t numel, at::ScalarType dtype) const;

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace tessera::runtime::offload
