// AsyncMode: how a training loop saves its checkpoints, by the names torchtitan's
// `checkpoint.async_mode` uses.
//
//   disabled               every save blocks until the checkpoint is committed;
//   async                  the save copies the state into new host buffers and a
//                          background thread writes and commits it;
//   async_with_pinned_mem  the same with host buffers kept from one save to the
//                          next (page-locked where a CUDA device is present), so
//                          the copy neither allocates nor faults in fresh pages.
//
// Plain values; parse_async_mode throws ConfigError listing the three names.
#pragma once

#include <string>

namespace tessera::checkpoint {

enum class AsyncMode { kDisabled, kAsync, kAsyncWithPinnedMem };

// "disabled", "async", "async_with_pinned_mem".
const char* async_mode_name(AsyncMode mode);
// The inverse; ConfigError naming `what` (the config key) for any other text.
AsyncMode parse_async_mode(const std::string& text, const std::string& what = "async_mode");

}  // namespace tessera::checkpoint
