// GlooBackend: placeholder until the gloo backend lands.
#pragma once

#include <memory>

#include "tessera/comm/base/backend.h"

namespace tessera::comm {

// Factory registered as "gloo" in backend_registry.cpp. Collective over the group.
std::unique_ptr<Backend> make_gloo_backend(const BackendContext& ctx);

}  // namespace tessera::comm
