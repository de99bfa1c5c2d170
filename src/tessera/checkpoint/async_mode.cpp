#include "tessera/checkpoint/async_mode.h"

#include "tessera/core/check.h"

namespace tessera::checkpoint {

const char* async_mode_name(AsyncMode mode) {
  switch (mode) {
    case AsyncMode::kDisabled: return "disabled";
    case AsyncMode::kAsync: return "async";
    case AsyncMode::kAsyncWithPinnedMem: return "async_with_pinned_mem";
  }
  return "?";
}

AsyncMode parse_async_mode(const std::string& text, const std::string& what) {
  for (AsyncMode m : {AsyncMode::kDisabled, AsyncMode::kAsync, AsyncMode::kAsyncWithPinnedMem}) {
    if (text == async_mode_name(m)) return m;
  }
  TS_THROW(ConfigError, "config key '", what, "' is '", text,
           "': use disabled, async or async_with_pinned_mem");
}

}  // namespace tessera::checkpoint
