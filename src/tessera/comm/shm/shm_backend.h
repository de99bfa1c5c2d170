// ShmBackend: collectives and point-to-point through POSIX shared memory, for a
// group whose ranks all run on one host (threads or processes).
//
// Group rank 0 creates one segment per group (shm_segment.h) and announces its
// name through the group's store; the others map it, and the last to map it
// unlinks the name, so even a SIGKILL leaves nothing in /dev/shm. Each rank owns
// two slot buffers (used by step parity: whatever a rank publishes with step s
// lives in buffer s % 2, so a buffer is rewritten only after every rank has
// finished reading it) and a step counter that the others wait on (spin, then
// futex; shm_sync.h). Algorithms (cost per rank, S bytes, N ranks):
//   * all_reduce, small (<= small_bytes): copy in, one step, every rank reduces
//     all N slots (reads N*S);
//   * all_reduce, large: per chunk, copy in the N-1 slices others reduce, step,
//     reduce own slice (into the output and own slot), step, copy the N-1 reduced
//     slices out: about 3*S copied, any size, pipelined across ranks;
//   * broadcast, all_gather, reduce_scatter: chunked through the slots;
//   * all_to_all: every rank publishes its split sizes, its pid and the address
//     of its input, and each receiver copies its pieces straight out of the
//     senders' memory (process_vm_readv: one copy, about S read and written);
//     a second step tells the senders their input may go. Where the kernel
//     refuses (ptrace policy, seccomp) or TESSERA_SHM_CMA=0, each sender's
//     pieces stream back to back through its slots (two copies);
//   * send/recv: a byte ring per ordered pair; the receiver sets aside messages
//     of other tags, so the sender never waits for more than ring space.
// Reductions (shm_reduce.h): float32/64, float16/bfloat16 (float32 accumulation),
// int32/64; sum, avg, min, max, product.
//
// Failures: every wait checks the op deadline (TimeoutError naming the ranks that
// have not arrived), the liveness of the ranks it waits for (CommError "rank r
// (pid p) exited") and the group's poison word: a rank whose collective fails
// marks the group broken so every other rank fails fast instead of timing out.
//
// Thread safety: as Backend (backend.h): collectives from one thread; send from
// one thread and recv from one thread, concurrently with collectives.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tessera/comm/base/backend.h"
#include "tessera/comm/shm/shm_segment.h"

namespace tessera::comm {

struct ShmOptions {
  uint64_t slot_bytes = 1 << 20;   // per buffer per rank; the pipeline chunk
  uint64_t ring_bytes = 1 << 18;   // per ordered pair of ranks, power of two
  uint64_t small_bytes = 1 << 18;  // all_reduce up to this size: one-step algorithm
};

class ShmBackend final : public Backend {
 public:
  // Collective over the group: ConfigError if its ranks are not on one host,
  // CommError if the segment cannot be created or mapped.
  explicit ShmBackend(const BackendContext& ctx, ShmOptions options = {});
  ~ShmBackend() override;

  std::string name() const override { return "shm"; }
  bool reduces_natively(at::ScalarType dtype) const override { return true; }
  bool supports_avg() const override { return true; }

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

  // The segment's name (already unlinked once every rank has mapped it).
  const std::string& segment_name() const { return segment_.name(); }

 private:
  struct OpScope {
    const char* op;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::steady_clock::time_point next_liveness_check;
  };
  OpScope begin(const char* op) const;

  // Publishes this rank's next step and waits until every rank has published it.
  void step(OpScope& scope);
  // Throws if the op must end: abort, poison, a dead peer among `waiting`, deadline.
  void check_collective(OpScope& scope, uint32_t target);
  void check_p2p(OpScope& scope, int peer);
  void check_peer_alive(OpScope& scope, int peer);
  [[noreturn]] void fail_collective(OpScope& scope, const std::string& why, bool timeout);

  shm::RankControl& control(int rank) const;
  // Buffer that data published with step `s` lives in.
  uint8_t* slot(int rank, uint32_t s) const;
  shm::RingControl& ring_control(int src, int dst) const;
  uint8_t* ring(int src, int dst) const;
  uint32_t next_step() const { return step_ + 1; }

  void all_reduce_small(uint8_t* data, int64_t count, c10::ScalarType dtype, ReduceOp op,
                        OpScope& scope);
  void all_reduce_large(uint8_t* data, int64_t count, c10::ScalarType dtype, ReduceOp op,
                        OpScope& scope);
  // Streams n bytes into (out of) ring src->dst, waiting for space (data).
  void ring_write(int dst, const uint8_t* src, uint64_t n, OpScope& scope);
  void ring_read(int src, uint8_t* dst, uint64_t n, OpScope& scope);
  // all_to_all's single-copy path: reads this rank's pieces out of the
  // senders' inputs; false (and the group falls back for good) if any rank
  // could not.
  bool all_to_all_direct(uint8_t* out, const std::vector<int64_t>& recv_first,
                         const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& counts,
                         const std::vector<int64_t>& pids, const std::vector<int64_t>& inputs,
                         int64_t es, OpScope& scope);
  // Cross-memory reads for all_to_all: 1 on, 0 off (refused once, or
  // TESSERA_SHM_CMA=0). Every rank holds the same value.
  int cross_memory_ = 1;

  ShmOptions options_;
  shm::SegmentLayout layout_;
  shm::ShmSegment segment_;
  shm::SegmentHeader* header_ = nullptr;
  uint32_t step_ = 0;  // steps this rank has published (collective thread only)
  std::atomic<bool> aborted_{false};
  // Messages received for a tag nobody was waiting for yet: (src, tag) -> FIFO.
  std::mutex unexpected_mu_;
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> unexpected_;
};

// Factory registered as "shm" in backend_registry.cpp. Collective over the group.
std::unique_ptr<Backend> make_shm_backend(const BackendContext& ctx);

}  // namespace tessera::comm
