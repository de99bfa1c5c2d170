// The AsyncIo engines behind make_async_io() (async_io.h); internal.
#pragma once

#include <memory>
#include <string>

#include "tessera/runtime/offload/async_io.h"

namespace tessera::runtime::offload {

// nullptr, with the reason in *why_not, when io_uring is unavailable here.
std::unique_ptr<AsyncIo> make_uring_io(const AsyncIoOptions& options, std::string* why_not);
std::unique_ptr<AsyncIo> make_posix_io(const AsyncIoOptions& options);

}  // namespace tessera::runtime::offload
