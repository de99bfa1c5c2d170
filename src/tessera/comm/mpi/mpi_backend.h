// MpiBackend: placeholder until the mpi backend lands.
#pragma once

#include <memory>

#include "tessera/comm/base/backend.h"

namespace tessera::comm {

// Factory registered as "mpi" in backend_registry.cpp. Collective over the group.
std::unique_ptr<Backend> make_mpi_backend(const BackendContext& ctx);

}  // namespace tessera::comm
