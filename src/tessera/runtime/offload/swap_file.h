// SwapFile: one file of a rank's offload swap space (swap_space.h) holding one
// flat tensor (a unit's parameter shard or one optimizer state field), read and
// written in pieces through AsyncIo.
//
// The file is opened with O_DIRECT where the filesystem allows it (the page
// cache would otherwise keep a second copy of everything offloaded, in the very
// memory offload is meant to free), and preallocated to its full size when
// created, so a disk that is too small fails then, not in the middle of a step.
// Its size is rounded up to kIoAlignment; pieces start at aligned offsets.
// Owned by its SwapSpace; not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "tessera/runtime/offload/async_io.h"

namespace tessera::runtime::offload {

class SwapFile {
 public:
  // Creates (truncating) `path` for `bytes` bytes. Error naming the path and the
  // cause (ENOSPC: the disk is full) if it cannot be created or preallocated.
  SwapFile(std::string path, int64_t bytes);
  // Closes and removes the file (unless replace_with() moved it elsewhere).
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t bytes() const { return bytes_; }          // as asked
  int64_t allocated() const { return allocated_; }  // rounded up to kIoAlignment
  bool direct() const { return direct_; }

  // Asynchronous transfer of [offset, offset + bytes) (offset aligned; bytes is
  // rounded up to kIoAlignment, so `buffer` must have room for that).
  AsyncIo::Ticket read(AsyncIo& io, void* buffer, int64_t offset, int64_t bytes) const;
  AsyncIo::Ticket write(AsyncIo& io, const void* buffer, int64_t offset, int64_t bytes) const;

  // The whole content as a read-only tensor of `dtype` mapped from the file (no
  // copy; pages are read on first touch and belong to the page cache, not to the
  // process's anonymous memory). Valid while this SwapFile lives; call after
  // every write to the file has completed.
  at::Tensor map(at::ScalarType dtype) const;
  // Replaces the whole content with `values` (contiguous, bytes() bytes),
  // synchronously, through a small aligned staging buffer.
  void store(AsyncIo& io, const at::Tensor& values) const;

  // Moves `other`'s file over this one (rename), taking its descriptor: the
  // commit of a staged checkpoint load. Both must have the same size.
  void replace_with(SwapFile&& other);

 private:
  std::string path_;
  int64_t bytes_ = 0;
  int64_t allocated_ = 0;
  int fd_ = -1;
  bool direct_ = true;
};

}  // namespace tessera::runtime::offload
