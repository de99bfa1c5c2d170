#include "tessera/comm/backend_registry.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "tessera/config.h"
#include "tessera/core/check.h"

#if TESSERA_WITH_GLOO
#include "tessera/comm/gloo/gloo_backend.h"
#endif
#if TESSERA_WITH_SHM
#include "tessera/comm/shm/host_identity.h"
#include "tessera/comm/shm/shm_backend.h"
#endif
#if TESSERA_WITH_SHM && TESSERA_WITH_GLOO
#include "tessera/comm/hierarchical/hierarchical_backend.h"
#endif
#if TESSERA_WITH_MPI
#include "tessera/comm/mpi/mpi_backend.h"
#endif
#if TESSERA_WITH_NCCL
#include "tessera/comm/nccl/nccl_backend.h"
#endif
#include "tessera/comm/device_dispatch_backend.h"

namespace tessera::comm {
namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

// The built-in backends, registered on first use (static registration objects in
// static libraries would be dropped by the linker).
std::map<std::string, BackendFactory> builtin_factories() {
  std::map<std::string, BackendFactory> map;
#if TESSERA_WITH_GLOO
  map["gloo"] = make_gloo_backend;
#endif
#if TESSERA_WITH_SHM
  map["shm"] = make_shm_backend;
#endif
#if TESSERA_WITH_MPI
  map["mpi"] = make_mpi_backend;
#endif
#if TESSERA_WITH_SHM && TESSERA_WITH_GLOO
  map["hierarchical"] = make_hierarchical_backend;
#endif
#if TESSERA_WITH_NCCL
  map["nccl"] = nccl::make_nccl_backend;
#endif
  return map;
}

std::map<std::string, BackendFactory>& factories() {
  static std::map<std::string, BackendFactory> map = builtin_factories();
  return map;
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  factories()[name] = std::move(factory);
}

std::vector<std::string> available_backends() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& kv : factories()) names.push_back(kv.first);
  return names;
}

bool has_backend(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return factories().count(name) > 0;
}

std::unique_ptr<Backend> create_backend(const std::string& name, const BackendContext& ctx) {
  if (is_device_spec(name)) return make_device_dispatch_backend(name, ctx);
  BackendFactory factory;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = factories().find(name);
    if (it != factories().end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : available_backends()) known += (known.empty() ? "" : ", ") + n;
    TS_THROW(ConfigError, "unknown or unavailable backend '", name, "'; this build has: ", known);
  }
  return factory(ctx);
}

std::string resolve_backend_name(const std::string& requested, const BackendContext& ctx) {
  if (is_device_spec(requested)) {
    // "cpu:gloo,cuda:nccl": each part is resolved when the group builds it.
    for (const auto& [device, name] : parse_device_spec(requested)) {
      TS_CHECK_T(ConfigError, name == "auto" || has_backend(name),
                 "unknown or unavailable backend '", name, "' in '", requested,
                 "' (set TESSERA_BACKEND to backends `tessera doctor` lists)");
    }
    return requested;
  }
  if (!requested.empty() && requested != "auto") {
    TS_CHECK_T(ConfigError, has_backend(requested), "unknown or unavailable backend '", requested,
               "' (set TESSERA_BACKEND to one of the backends `tessera doctor` lists)");
    return requested;
  }
#if TESSERA_WITH_SHM
  // shm when the whole group shares a host, hierarchical when it spans hosts with
  // several ranks on some host, gloo otherwise. Every rank sees the same hosts.
  if (ctx.size > 1 && has_backend("shm")) {
    std::vector<int> hosts = shm::host_indices(ctx);
    int num_hosts = *std::max_element(hosts.begin(), hosts.end()) + 1;
    if (num_hosts == 1) return "shm";
    if (num_hosts < ctx.size && has_backend("hierarchical")) return "hierarchical";
  }
#endif
  TS_CHECK_T(ConfigError, has_backend("gloo"), "no backend for TESSERA_BACKEND=auto in this build");
  return "gloo";
}

}  // namespace tessera::comm
