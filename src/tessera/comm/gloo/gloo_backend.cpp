#include "tessera/comm/gloo/gloo_backend.h"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <numeric>

#include "tessera/comm/gloo/gloo_device.h"
#include "tessera/comm/gloo/gloo_dtype.h"
#include "tessera/comm/gloo/gloo_error.h"
#include "tessera/comm/gloo/gloo_ring.h"
#include "tessera/comm/gloo/gloo_send_queue.h"
#include "tessera/comm/gloo/gloo_store_adapter.h"
#include "tessera/core/check.h"
#include "tessera/core/logging.h"

namespace tessera::comm {
namespace {

// Measured at 2 ranks over loopback (docs/collectives.md): ring is at least as
// fast as bcube at 1 MiB and about 5x faster at 32 MiB, where bcube's extra
// copies dominate.
constexpr auto kAllreduceAlgorithm = ::gloo::AllreduceOptions::Algorithm::RING;

// Gloo dislikes null pointers even for zero bytes; empty tensors point here.
char g_empty_byte;

void* ptr_of(const at::Tensor& t) {
  return t.numel() == 0 ? static_cast<void*>(&g_empty_byte) : const_cast<void*>(t.data_ptr());
}

std::vector<size_t> to_sizes(const std::vector<int64_t>& counts) {
  return std::vector<size_t>(counts.begin(), counts.end());
}

}  // namespace

[[noreturn]] void throw_gloo_error(const std::string& what, const std::string& detail) {
  bool timeout = detail.find("Timed out") != std::string::npos ||
                 detail.find("timed out") != std::string::npos;
  std::string msg = c10::str("gloo ", what, " failed: ", detail);
  if (timeout) {
    TS_THROW(TimeoutError, msg,
             "; a peer did not take part within the timeout (raise TESSERA_TIMEOUT if it is "
             "just slow)");
  }
  TS_THROW(CommError, msg, "; a peer may have exited or be unreachable");
}

GlooBackend::GlooBackend(BackendContext ctx) : Backend(std::move(ctx)) {
  if (size() == 1) return;
  GlooAddress address = choose_gloo_address(ctx_.rendezvous_host);
  auto device = make_gloo_device(address);
  auto context = std::make_shared<::gloo::rendezvous::Context>(rank(), size());
  context->setTimeout(ctx_.timeout);
  GlooStoreAdapter store(ctx_.store, ctx_.timeout);
  TS_GLOO_CALL(c10::str("rendezvous of group '", ctx_.group_name, "' (rank ", rank(), " of ",
                        size(), ", bound to ", device->str(), " from ", address.source, ")"),
               context->connectFullMesh(store, device));
  context_ = std::move(context);
  sends_ = std::make_unique<GlooSendQueue>(ctx_.timeout);
  TS_LOG(DEBUG) << "gloo group '" << ctx_.group_name << "' rank " << rank() << "/" << size()
                << " connected on " << device->str();
}

GlooBackend::~GlooBackend() = default;

bool GlooBackend::reduces_natively(at::ScalarType dtype) const {
  return dtype != at::kHalf && dtype != at::kBFloat16;
}

void GlooBackend::check_usable(const char* op) const {
  TS_CHECK_T(CommError, !aborted_.load(), "gloo ", op,
             " called after the group was aborted; create a new group");
}

uint32_t GlooBackend::begin_collective(const char* op) {
  check_usable(op);
  return next_tag_++;
}

void GlooBackend::all_reduce(at::Tensor& data, ReduceOp op) {
  uint32_t tag = begin_collective("all_reduce");
  GlooReduceFn fn = gloo_reduce_fn(data.scalar_type(), op);  // rejects avg/dtypes everywhere
  if (size() == 1 || data.numel() == 0) return;
  gloo_dispatch(data.scalar_type(), [&](auto t) {
    using T = decltype(t);
    ::gloo::AllreduceOptions opts(context_);
    opts.setOutput<T>(static_cast<T*>(data.data_ptr()), static_cast<size_t>(data.numel()));
    opts.setReduceFunction(fn);
    opts.setAlgorithm(kAllreduceAlgorithm);
    opts.setTag(tag);
    opts.setTimeout(ctx_.timeout);
    TS_GLOO_CALL("all_reduce", ::gloo::allreduce(opts));
  });
}

void GlooBackend::broadcast(at::Tensor& data, int root) {
  uint32_t tag = begin_collective("broadcast");
  TS_CHECK_T(CommError, root >= 0 && root < size(), "gloo broadcast: root ", root,
             " is not a rank of this group of ", size());
  if (size() == 1 || data.numel() == 0) return;
  gloo_dispatch(data.scalar_type(), [&](auto t) {
    using T = decltype(t);
    ::gloo::BroadcastOptions opts(context_);
    opts.setOutput<T>(static_cast<T*>(data.data_ptr()), static_cast<size_t>(data.numel()));
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(ctx_.timeout);
    TS_GLOO_CALL("broadcast", ::gloo::broadcast(opts));
  });
}

void GlooBackend::all_gather(const at::Tensor& input, at::Tensor& output,
                             const std::vector<int64_t>& counts) {
  uint32_t tag = begin_collective("all_gather");
  TS_CHECK_EQ(static_cast<int>(counts.size()), size(), "gloo all_gather: one count per rank");
  TS_CHECK_EQ(input.numel(), counts[rank()], "gloo all_gather: input size");
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  TS_CHECK_EQ(output.numel(), total, "gloo all_gather: output size");
  if (size() == 1) {
    if (total > 0 && output.data_ptr() != input.data_ptr()) output.copy_(input);
    return;
  }
  if (total == 0) return;  // every rank sees the same counts, so every rank skips
  gloo_dispatch(input.scalar_type(), [&](auto t) {
    using T = decltype(t);
    ::gloo::AllgathervOptions opts(context_);
    opts.setInput<T>(static_cast<T*>(ptr_of(input)), static_cast<size_t>(input.numel()));
    opts.setOutput<T>(static_cast<T*>(output.data_ptr()), to_sizes(counts));
    opts.setTag(tag);
    opts.setTimeout(ctx_.timeout);
    TS_GLOO_CALL("all_gather", ::gloo::allgatherv(opts));
  });
}

void GlooBackend::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                 const std::vector<int64_t>& counts, ReduceOp op) {
  uint32_t tag = begin_collective("reduce_scatter");
  GlooReduceFn fn = gloo_reduce_fn(input.scalar_type(), op);
  TS_CHECK_EQ(static_cast<int>(counts.size()), size(), "gloo reduce_scatter: one count per rank");
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  TS_CHECK_EQ(input.numel(), total, "gloo reduce_scatter: input size");
  TS_CHECK_EQ(output.numel(), counts[rank()], "gloo reduce_scatter: output size");
  if (total == 0) return;
  const int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank(), int64_t{0});
  if (size() == 1) {
    output.copy_(input);
    return;
  }
  // The ring reduces in place, so it works on a copy of the input.
  at::Tensor work = input.clone();
  TS_GLOO_CALL("reduce_scatter",
               gloo_ring_reduce_scatter(*context_, gloo_slot(kGlooReduceScatterPrefix, tag),
                                        work.data_ptr(), counts, input.element_size(), fn,
                                        ctx_.timeout, &active_));
  if (output.numel() > 0) output.copy_(work.narrow(0, offset, counts[rank()]));
}

void GlooBackend::all_to_all(const at::Tensor& input, at::Tensor& output,
                             const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& recv_counts) {
  uint32_t tag = begin_collective("all_to_all");
  TS_CHECK_EQ(static_cast<int>(send_counts.size()), size(), "gloo all_to_all: send counts");
  TS_CHECK_EQ(static_cast<int>(recv_counts.size()), size(), "gloo all_to_all: recv counts");
  TS_CHECK_EQ(send_counts[rank()], recv_counts[rank()], "gloo all_to_all: own slice");
  if (size() == 1) {
    if (input.numel() > 0 && output.data_ptr() != input.data_ptr()) output.copy_(input);
    return;
  }
  gloo_dispatch(input.scalar_type(), [&](auto t) {
    using T = decltype(t);
    ::gloo::AlltoallvOptions opts(context_);
    opts.setInput<T>(static_cast<T*>(ptr_of(input)), send_counts);
    opts.setOutput<T>(static_cast<T*>(ptr_of(output)), recv_counts);
    opts.setTag(tag);
    opts.setTimeout(ctx_.timeout);
    TS_GLOO_CALL("all_to_all", ::gloo::alltoallv(opts));
  });
}

void GlooBackend::send(const at::Tensor& data, int dst, int tag) {
  check_usable("send");
  TS_CHECK_T(CommError, dst >= 0 && dst < size() && dst != rank(), "gloo send: destination ",
             dst, " must be another rank of this group of ", size());
  sends_->check();
  if (data.numel() == 0) return;  // the receiver skips its empty recv too
  // A private copy: the caller may reuse `data` as soon as send() returns, while
  // gloo only moves the bytes once the receiver has posted its recv.
  at::Tensor staging = data.clone();
  const size_t nbytes = static_cast<size_t>(staging.numel()) * staging.element_size();
  TS_GLOO_CALL("send", {
    auto buffer = context_->createUnboundBuffer(staging.data_ptr(), nbytes);
    buffer->send(dst, gloo_slot(kGlooP2pPrefix, static_cast<uint32_t>(tag)));
    sends_->add(std::move(buffer), staging, dst);
  });
}

void GlooBackend::recv(at::Tensor& data, int src, int tag) {
  check_usable("recv");
  TS_CHECK_T(CommError, src >= 0 && src < size() && src != rank(), "gloo recv: source ", src,
             " must be another rank of this group of ", size());
  sends_->check();
  if (data.numel() == 0) return;
  const size_t nbytes = static_cast<size_t>(data.numel()) * data.element_size();
  TS_GLOO_CALL("recv", {
    auto buffer = context_->createUnboundBuffer(data.data_ptr(), nbytes);
    GlooActiveBuffers::Guard guard(&active_, buffer.get());
    buffer->recv(src, gloo_slot(kGlooP2pPrefix, static_cast<uint32_t>(tag)));
    if (!buffer->waitRecv(ctx_.timeout)) {
      TS_THROW(CommError, "gloo recv from rank ", src, " was aborted: the group is being torn down");
    }
  });
}

void GlooBackend::barrier() {
  uint32_t tag = begin_collective("barrier");
  if (size() == 1) return;
  ::gloo::BarrierOptions opts(context_);
  opts.setTag(tag);
  opts.setTimeout(ctx_.timeout);
  TS_GLOO_CALL("barrier", ::gloo::barrier(opts));
}

void GlooBackend::abort() {
  if (aborted_.exchange(true)) return;
  if (!context_) return;
  // Wakes the waits on buffers we own (recv, the send queue, reduce_scatter).
  active_.abort_all();
  sends_->abort();
  // Resetting every connection makes the peers' pending ops fail at once. A Gloo
  // algorithm blocked on this rank's collective thread is not reachable from
  // here (Debian's Gloo does not ship the transport's signalling headers); it
  // fails when a peer resets, or at the timeout.
  context_->closeConnections();
}

std::unique_ptr<Backend> make_gloo_backend(const BackendContext& ctx) {
  return std::make_unique<GlooBackend>(ctx);
}

}  // namespace tessera::comm
