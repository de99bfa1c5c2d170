// GlooBackend: the collectives over Gloo's TCP transport, for one group.
//
// Construction is collective: every rank creates a TCP device on the address
// choose_gloo_address() picks, publishes its pair addresses through the group's
// store (GlooStoreAdapter) and connects a full mesh (one TCP connection per pair
// of ranks). Groups of one rank skip Gloo entirely.
//
// Ops map to Gloo's algorithms (allreduce ring, broadcast, allgatherv, alltoallv,
// barrier); reduce_scatter is a ring over unbound buffers written here (Gloo has
// none for uneven counts); send/recv use unbound buffers with one slot per tag,
// and sends are completed in the background by a GlooSendQueue so that send()
// never waits for the receiver. Every op uses the group timeout; Gloo failures
// become CommError/TimeoutError carrying Gloo's text (gloo_error.h). After a
// timeout Gloo closes every connection of the group: the group is then broken.
//
// Half types are reduced pairwise and rounded back at each ring step, so
// reduces_natively() is false for them and the ProcessGroup reduces them through
// all_to_all and all_gather with one float32 rounding (half_reduction.h). No AVG.
// Thread safety: as Backend (one collective thread, plus one send and one recv
// thread); abort() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "tessera/comm/base/backend.h"
#include "tessera/comm/gloo/gloo_ring.h"

namespace gloo {
class Context;
}

namespace tessera::comm {

class GlooSendQueue;

class GlooBackend : public Backend {
 public:
  // Collective over the group; CommError/StoreError/TimeoutError if the mesh
  // can't be connected within ctx.timeout.
  explicit GlooBackend(BackendContext ctx);
  ~GlooBackend() override;

  std::string name() const override { return "gloo"; }
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

 private:
  // Throws CommError if abort() ran; returns the tag of the next collective.
  uint32_t begin_collective(const char* op);
  void check_usable(const char* op) const;

  std::shared_ptr<::gloo::Context> context_;  // null for a group of one
  std::unique_ptr<GlooSendQueue> sends_;      // destroyed before context_
  // Collectives run one at a time in the same order on every rank, so a counter
  // gives all ranks the same tag per op without any exchange.
  uint32_t next_tag_ = 1;
  std::atomic<bool> aborted_{false};
  GlooActiveBuffers active_;
};

// Factory registered as "gloo" in backend_registry.cpp. Collective over the group.
std::unique_ptr<Backend> make_gloo_backend(const BackendContext& ctx);

}  // namespace tessera::comm
