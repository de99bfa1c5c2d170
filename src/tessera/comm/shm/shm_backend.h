// ShmBackend: placeholder until the shm backend lands.
#pragma once

#include <memory>

#include "tessera/comm/base/backend.h"

namespace tessera::comm {

// Factory registered as "shm" in backend_registry.cpp. Collective over the group.
std::unique_ptr<Backend> make_shm_backend(const BackendContext& ctx);

}  // namespace tessera::comm
