#include "tessera/comm/hierarchical/hierarchical_backend.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

#include "tessera/comm/backend_registry.h"
#include "tessera/comm/base/prefix_store.h"
#include "tessera/comm/shm/host_identity.h"
#include "tessera/core/check.h"

namespace tessera::comm {
namespace {

// A sub-group's context: `members` are group ranks, this rank among them.
BackendContext sub_context(const BackendContext& ctx, const std::vector<int>& members,
                           const std::string& prefix, const std::string& suffix) {
  BackendContext sub;
  sub.store = std::make_shared<PrefixStore>(prefix, ctx.store);
  sub.rank =
      static_cast<int>(std::find(members.begin(), members.end(), ctx.rank) - members.begin());
  sub.size = static_cast<int>(members.size());
  for (int m : members) {
    sub.global_ranks.push_back(ctx.global_ranks.empty() ? m : ctx.global_ranks[m]);
  }
  sub.group_name = ctx.group_name + "/" + suffix;
  sub.timeout = ctx.timeout;
  sub.rendezvous_host = ctx.rendezvous_host;
  return sub;
}

std::vector<int64_t> even_counts(int64_t n, int parts) {
  std::vector<int64_t> counts(parts, n / parts);
  for (int i = 0; i < n % parts; ++i) ++counts[i];
  return counts;
}

}  // namespace

HierarchicalBackend::HierarchicalBackend(const BackendContext& ctx, std::vector<int> hosts,
                                         const std::string& intra, const std::string& inter)
    : Backend(ctx) {
  if (hosts.empty()) hosts = shm::host_indices(ctx);
  TS_CHECK_EQ(static_cast<int>(hosts.size()), ctx.size, "hierarchical: one host index per rank");
  std::map<int, std::vector<int>> by_host;
  for (int r = 0; r < ctx.size; ++r) by_host[hosts[r]].push_back(r);
  const std::vector<int>& local = by_host[hosts[ctx.rank]];
  const int local_rank =
      static_cast<int>(std::find(local.begin(), local.end(), ctx.rank) - local.begin());
  bool uniform = true;
  for (const auto& kv : by_host) uniform = uniform && kv.second.size() == local.size();
  composed_ = uniform && by_host.size() > 1;
  // Same order on every rank: intra (per host), inter (per local index), flat.
  intra_ = create_backend(
      intra, sub_context(ctx, local, "hier/intra/" + std::to_string(hosts[ctx.rank]), "intra"));
  if (composed_) {
    std::vector<int> peers;
    for (const auto& kv : by_host) peers.push_back(kv.second[local_rank]);
    inter_ = create_backend(
        inter, sub_context(ctx, peers, "hier/inter/" + std::to_string(local_rank), "inter"));
  }
  std::vector<int> all(ctx.size);
  for (int r = 0; r < ctx.size; ++r) all[r] = r;
  flat_ = create_backend(inter, sub_context(ctx, all, "hier/flat", "flat"));
}

HierarchicalBackend::~HierarchicalBackend() = default;

bool HierarchicalBackend::reduces_natively(at::ScalarType dtype) const {
  return intra_->reduces_natively(dtype) && flat_->reduces_natively(dtype);
}

void HierarchicalBackend::all_reduce(at::Tensor& data, ReduceOp op) {
  if (op == ReduceOp::kAvg) {
    // Composed sums then one division, as the ProcessGroup would do.
    all_reduce(data, ReduceOp::kSum);
    if (at::isIntegralType(data.scalar_type(), false)) {
      data.copy_(at::div(data, size(), "trunc"));
    } else {
      data.div_(size());
    }
    return;
  }
  if (!composed_) return flat_->all_reduce(data, op);
  const int local_size = intra_->size();
  if (local_size == 1) return inter_->all_reduce(data, op);
  std::vector<int64_t> counts = even_counts(data.numel(), local_size);
  at::Tensor shard = at::empty({counts[intra_->rank()]}, data.options());
  intra_->reduce_scatter(data, shard, counts, op);
  inter_->all_reduce(shard, op);
  intra_->all_gather(shard, data, counts);
}

void HierarchicalBackend::broadcast(at::Tensor& data, int root) { flat_->broadcast(data, root); }

void HierarchicalBackend::all_gather(const at::Tensor& input, at::Tensor& output,
                                     const std::vector<int64_t>& counts) {
  flat_->all_gather(input, output, counts);
}

void HierarchicalBackend::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                         const std::vector<int64_t>& counts, ReduceOp op) {
  flat_->reduce_scatter(input, output, counts, op);
}

void HierarchicalBackend::all_to_all(const at::Tensor& input, at::Tensor& output,
                                     const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& recv_counts) {
  flat_->all_to_all(input, output, send_counts, recv_counts);
}

void HierarchicalBackend::send(const at::Tensor& data, int dst, int tag) {
  flat_->send(data, dst, tag);
}

void HierarchicalBackend::recv(at::Tensor& data, int src, int tag) { flat_->recv(data, src, tag); }

void HierarchicalBackend::barrier() { flat_->barrier(); }

void HierarchicalBackend::abort() {
  for (Backend* b : {intra_.get(), inter_.get(), flat_.get()}) {
    if (b != nullptr) b->abort();
  }
}

std::unique_ptr<Backend> make_hierarchical_backend(const BackendContext& ctx) {
  return std::make_unique<HierarchicalBackend>(ctx);
}

}  // namespace tessera::comm
