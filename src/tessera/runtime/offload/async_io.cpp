#include "tessera/runtime/offload/async_io.h"

#include "tessera/core/check.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/offload/async_io_engines.h"

namespace tessera::runtime::offload {

std::unique_ptr<AsyncIo> make_async_io(AsyncIoOptions options) {
  const std::string& e = options.engine;
  TS_CHECK_T(ConfigError, e == "auto" || e == "uring" || e == "posix", "offload I/O engine '", e,
             "' is unknown (TESSERA_AIO): use auto, uring or posix");
  if (e == "posix") return make_posix_io(options);
  std::string why_not;
  std::unique_ptr<AsyncIo> io = make_uring_io(options, &why_not);
  if (io) return io;
  TS_CHECK_T(ConfigError, e == "auto", "offload I/O engine 'uring' is unavailable: ", why_not,
             "; set TESSERA_AIO=posix (or auto) to use pread/pwrite on a background thread");
  TS_LOG(INFO) << "offload I/O: io_uring is unavailable (" << why_not
               << "); using pread/pwrite on a background thread";
  return make_posix_io(options);
}

}  // namespace tessera::runtime::offload
