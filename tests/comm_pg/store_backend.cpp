#include "comm_pg/store_backend.h"

#include <ATen/ATen.h>

#include <atomic>
#include <cstring>

#include "tessera/comm/backend_registry.h"
#include "tessera/core/check.h"

namespace tessera::testing {
namespace {

using comm::Bytes;

Bytes to_bytes(const at::Tensor& t) {
  Bytes b(t.numel() * t.element_size());
  if (!b.empty()) std::memcpy(b.data(), t.data_ptr(), b.size());
  return b;
}

at::Tensor from_bytes(const Bytes& b, const at::Tensor& like, int64_t numel) {
  at::Tensor t = at::empty({numel}, like.options());
  if (!b.empty()) std::memcpy(t.data_ptr(), b.data(), b.size());
  return t;
}

class StoreBackend : public comm::Backend {
 public:
  using Backend::Backend;
  std::string name() const override { return "store"; }
  bool reduces_natively(at::ScalarType t) const override {
    return t != at::kHalf && t != at::kBFloat16;
  }

  void all_reduce(at::Tensor& data, comm::ReduceOp op) override {
    auto all = exchange(data);
    at::Tensor acc = all[0].clone();
    for (size_t r = 1; r < all.size(); ++r) {
      switch (op) {
        case comm::ReduceOp::kSum: acc.add_(all[r]); break;
        case comm::ReduceOp::kProduct: acc.mul_(all[r]); break;
        case comm::ReduceOp::kMin: acc = at::minimum(acc, all[r]); break;
        case comm::ReduceOp::kMax: acc = at::maximum(acc, all[r]); break;
        default: TS_THROW(CommError, "store backend: unsupported op");
      }
    }
    data.copy_(acc);
  }
  void broadcast(at::Tensor& data, int root) override { data.copy_(exchange(data)[root]); }
  void all_gather(const at::Tensor& in, at::Tensor& out, const std::vector<int64_t>& counts) override {
    auto all = exchange(in, counts);
    int64_t off = 0;
    for (size_t r = 0; r < all.size(); ++r) {
      out.narrow(0, off, counts[r]).copy_(all[r]);
      off += counts[r];
    }
  }
  void reduce_scatter(const at::Tensor& in, at::Tensor& out, const std::vector<int64_t>& counts,
                      comm::ReduceOp op) override {
    at::Tensor full = in.clone();
    all_reduce(full, op);
    int64_t off = 0;
    for (int r = 0; r < rank(); ++r) off += counts[r];
    out.copy_(full.narrow(0, off, counts[rank()]));
  }
  void all_to_all(const at::Tensor& in, at::Tensor& out, const std::vector<int64_t>& send_counts,
                  const std::vector<int64_t>& recv_counts) override {
    const uint64_t round = ++round_;
    int64_t off = 0;
    for (int dst = 0; dst < size(); ++dst) {
      ctx_.store->set(c10::str("a2a/", round, "/", rank(), "/", dst),
                      to_bytes(in.narrow(0, off, send_counts[dst]).contiguous()));
      off += send_counts[dst];
    }
    off = 0;
    for (int src = 0; src < size(); ++src) {
      out.narrow(0, off, recv_counts[src])
          .copy_(from_bytes(ctx_.store->get(c10::str("a2a/", round, "/", src, "/", rank())), in,
                            recv_counts[src]));
      off += recv_counts[src];
    }
  }
  void send(const at::Tensor& data, int dst, int tag) override {
    ctx_.store->set(c10::str("p2p/", rank(), "/", dst, "/", tag, "/", sent_[dst]++), to_bytes(data));
  }
  void recv(at::Tensor& data, int src, int tag) override {
    std::string key = c10::str("p2p/", src, "/", rank(), "/", tag, "/", received_[src]++);
    data.copy_(from_bytes(ctx_.store->get(key), data, data.numel()));
  }
  void barrier() override {
    at::Tensor t = at::zeros({1});
    exchange(t);
  }

 private:
  std::vector<at::Tensor> exchange(const at::Tensor& data, std::vector<int64_t> counts = {}) {
    if (counts.empty()) counts.assign(size(), data.numel());
    uint64_t round = ++round_;
    ctx_.store->set(c10::str("x/", round, "/", rank()), to_bytes(data));
    std::vector<at::Tensor> all;
    for (int r = 0; r < size(); ++r) {
      all.push_back(from_bytes(ctx_.store->get(c10::str("x/", round, "/", r)), data, counts[r]));
    }
    return all;
  }
  uint64_t round_ = 0;
  std::map<int, int> sent_, received_;
};

}  // namespace

void register_store_backend() {
  comm::register_backend("store", [](const comm::BackendContext& ctx) {
    return std::make_unique<StoreBackend>(ctx);
  });
}

}  // namespace tessera::testing
