// HierarchicalBackend: collectives for a group that spans hosts with several
// ranks per host, composed of an intra-host group (shm) and inter-host groups.
//
// all_reduce (the op that carries gradients) is composed as
//   intra-host reduce_scatter (shm)  ->  inter-host all_reduce of each shard
//   (gloo, between the ranks with the same local index on every host)  ->
//   intra-host all_gather (shm),
// so each host sends 1/L of the data per rank over the network instead of all
// of it, and the L ranks of a host use the network in parallel. The other ops
// move little data or are latency bound: they run on a flat group (gloo) over
// every rank. When hosts have different numbers of ranks the shard groups would
// not line up, so all_reduce falls back to the flat group as well.
//
// Ownership: owns its three sub-backends; their stores are namespaces
// ("hier/intra/<host>", "hier/inter/<local index>", "hier/flat") of this group's.
// Thread safety: as Backend (backend.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/base/backend.h"

namespace tessera::comm {

class HierarchicalBackend final : public Backend {
 public:
  // Collective over the group. `hosts` gives each group rank's host index (empty:
  // learned from the real host identities, shm/host_identity.h); tests pass one to
  // emulate several hosts. intra/inter name the registered backends to compose.
  explicit HierarchicalBackend(const BackendContext& ctx, std::vector<int> hosts = {},
                               const std::string& intra = "shm", const std::string& inter = "gloo");
  ~HierarchicalBackend() override;

  std::string name() const override { return "hierarchical"; }
  // Half types are reduced by the inter-host backend too, so they are native only
  // when it reduces them natively.
  bool reduces_natively(at::ScalarType dtype) const override;
  bool supports_avg() const override { return false; }

  void all_reduce(at::Tensor& data, ReduceOp op) override;
  void broadcast(at::Tensor& data, int root) override;
  void all_gather(const at::Tensor& input, at::Tensor& output,
                  const std::vector<int64_t>& counts) override;
  void reduce_scatter(const at::Tensor& input, at::Tensor& output,
                      const std::vector<int64_t>& counts, ReduceOp op) override;
  void all_to_all(const at::Tensor& input, at::Tensor& output,
                  const std::vector<int64_t>& send_counts,
                  const std::vector<int64_t>& recv_counts) override;
  void send(const at::Tensor& data, int dst, int tag) override;
  void recv(at::Tensor& data, int src, int tag) override;
  void barrier() override;
  void abort() override;

  // Whether all_reduce uses the two-level algorithm (every host has the same
  // number of ranks, more than one host).
  bool composed() const { return composed_; }

 private:
  std::unique_ptr<Backend> intra_;  // ranks of this host
  std::unique_ptr<Backend> inter_;  // same local index on every host
  std::unique_ptr<Backend> flat_;   // every rank
  bool composed_ = false;
};

// Factory registered as "hierarchical" in backend_registry.cpp. Collective.
std::unique_ptr<Backend> make_hierarchical_backend(const BackendContext& ctx);

}  // namespace tessera::comm
