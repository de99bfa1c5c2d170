// Backend registry: backend name -> factory. A new backend is a new class plus one
// registration line in backend_registry.cpp, never an edit to a switch elsewhere.
//
// Names: "gloo", "shm", "mpi", "nccl", "hierarchical" (when built; see
// tessera/config.h). "auto" resolves through resolve_backend_name(). A per-device
// spec such as "cpu:gloo,cuda:nccl" builds one backend per device type and
// routes each op by its tensors' device (device_dispatch_backend.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/base/backend.h"

namespace tessera::comm {

using BackendFactory = std::function<std::unique_ptr<Backend>(const BackendContext&)>;

// Names of the backends this build contains, in preference order.
std::vector<std::string> available_backends();
bool has_backend(const std::string& name);

// Creates the named backend; ConfigError naming the available ones if unknown or
// not built. Collective over the group (backends rendezvous through ctx.store).
std::unique_ptr<Backend> create_backend(const std::string& name, const BackendContext& ctx);

// Registers or replaces a factory (tests use this to inject fault backends).
void register_backend(const std::string& name, BackendFactory factory);

// Maps "auto" (and "") to a concrete backend for a group; other names pass through
// after validation. Collective over the group: it may use the store to learn
// which ranks share a host.
std::string resolve_backend_name(const std::string& requested, const BackendContext& ctx);

}  // namespace tessera::comm
