#include "tessera/comm/mpi/mpi_backend.h"

#include "tessera/core/check.h"

namespace tessera::comm {

std::unique_ptr<Backend> make_mpi_backend(const BackendContext&) {
  TS_THROW(ConfigError, "the mpi backend is not built yet");
}

}  // namespace tessera::comm
