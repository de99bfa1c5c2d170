#include "tessera/parallel/context/context_parallel.h"

#include <cmath>

#include "tessera/core/check.h"
#include "tessera/core/trace.h"
#include "tessera/parallel/context/block_attention.h"
#include "tessera/parallel/group_handle.h"

namespace tessera::parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

// Tags keep the ring's three streams of messages apart.
constexpr int kTagForwardKv = 7101;
constexpr int kTagBackwardKv = 7102;
constexpr int kTagKvGrad = 7103;

// Waits for a ring step's transfers. The time spent here is the communication
// the block computation did not hide: a "ring wait" span on the timeline, inside
// the step's "ring attention" span (bench/context_parallel.sh reads both).
void wait_ring(std::initializer_list<comm::WorkHandle*> works) {
  const int64_t start = trace::enabled() ? trace::now_ns() : 0;
  for (auto* w : works) {
    if (*w) (*w)->wait();
  }
  if (start != 0) trace::record("ring wait", "cp", start, trace::now_ns(), trace::lane("compute"));
}

comm::ProcessGroup& group_of(int64_t handle) { return group_from_handle(handle); }

// One hop around the ring: `t` leaves for the next rank while the previous
// rank's tensor of the same shape arrives; finish() waits for both and returns
// what arrived. A default RingHop moves nothing.
class RingHop {
 public:
  RingHop() = default;
  RingHop(comm::ProcessGroup& g, const torch::Tensor& t, int tag)
      : incoming_(torch::empty_like(t)),
        sent_(g.send(t, (g.rank() + 1) % g.size(), tag)),
        received_(g.recv(incoming_, (g.rank() + g.size() - 1) % g.size(), tag)) {}
  torch::Tensor finish() {
    wait_ring({&sent_, &received_});
    return incoming_;
  }

 private:
  torch::Tensor incoming_;
  comm::WorkHandle sent_, received_;
};

double scale_of(const torch::Tensor& q) { return 1.0 / std::sqrt(static_cast<double>(q.size(-1))); }

// Every rank's positions, concatenated in rank order: the order an all-gather
// or all-to-all lays the sequence out in.
torch::Tensor positions_in_rank_order(int64_t seq_len, int cp) {
  std::vector<torch::Tensor> all;
  for (int r = 0; r < cp; ++r) all.push_back(context_parallel_positions(seq_len, r, cp));
  return torch::cat(all);
}

// --- p2p: ring attention ---------------------------------------------------

struct RingAttention : Function<RingAttention> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor q, torch::Tensor k,
                               torch::Tensor v, bool causal, int64_t handle) {
    trace::Scope span("ring attention", "cp");
    auto& g = group_of(handle);
    const int n = g.size(), r = g.rank();
    const int64_t T = q.size(2) * n;
    const auto q_pos = context_parallel_positions(T, r, n);
    auto kv = torch::stack({k, v}).contiguous();
    BlockAttentionResult acc;
    for (int step = 0; step < n; ++step) {
      // The next block travels while this one computes.
      RingHop hop;
      if (step + 1 < n) hop = RingHop(g, kv, kTagForwardKv);
      const int src = (r - step + n) % n;
      merge_attention_blocks(acc, block_attention_forward(q, kv[0], kv[1], q_pos,
                                                          context_parallel_positions(T, src, n),
                                                          causal, scale_of(q), {2, 2}));
      if (step + 1 < n) kv = hop.finish();
    }
    ctx->save_for_backward({q, k, v, acc.out, acc.lse});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["group"] = handle;
    return acc.out.to(q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    trace::Scope span("ring attention backward", "cp");
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const bool causal = ctx->saved_data["causal"].toBool();
    auto& g = group_of(ctx->saved_data["group"].toInt());
    const int n = g.size(), r = g.rank();
    const int64_t T = q.size(2) * n;
    const auto q_pos = context_parallel_positions(T, r, n);
    auto dout = grads[0].to(torch::kFloat);
    auto delta = (dout * out).sum(-1);
    auto dq = torch::zeros(q.sizes(), q.options().dtype(torch::kFloat));
    auto kv = torch::stack({k, v}).contiguous();
    // The gradient of block src travels with it one step behind: rank r adds
    // its part to what rank r - 1 sent, while the next block computes; after a
    // full turn each rank holds the gradient of its own block.
    torch::Tensor dkv;
    RingHop grad_hop;
    for (int step = 0; step < n; ++step) {
      RingHop hop;
      if (step + 1 < n) hop = RingHop(g, kv, kTagBackwardKv);
      const int src = (r - step + n) % n;
      auto b = block_attention_backward(q, kv[0], kv[1], q_pos, context_parallel_positions(T, src, n),
                                        causal, scale_of(q), dout, lse, delta, {2, 2});
      dq.add_(b.dq);
      if (step == 0) {
        dkv = torch::stack({b.dk, b.dv});
      } else {
        dkv = grad_hop.finish();
        dkv[0].add_(b.dk);
        dkv[1].add_(b.dv);
      }
      grad_hop = RingHop(g, dkv, kTagKvGrad);
      if (step + 1 < n) kv = hop.finish();
    }
    dkv = grad_hop.finish();
    return {dq.to(q.scalar_type()), dkv[0].to(k.scalar_type()), dkv[1].to(v.scalar_type()),
            torch::Tensor(), torch::Tensor()};
  }
};

// --- a2a: Ulysses ----------------------------------------------------------

// [B, H, T/n, D] sequence-sharded -> [B, H/n, T, D] head-sharded, the sequence
// in rank order.
torch::Tensor sequence_to_heads(const torch::Tensor& x, comm::ProcessGroup& g) {
  const int64_t n = g.size(), B = x.size(0), H = x.size(1), Tl = x.size(2), D = x.size(3);
  auto send = x.reshape({B, n, H / n, Tl, D}).permute({1, 0, 2, 3, 4}).contiguous();
  auto recv = torch::empty_like(send);  // [src, B, H/n, Tl, D]
  g.all_to_all(recv, send)->wait();
  return recv.permute({1, 2, 0, 3, 4}).reshape({B, H / n, n * Tl, D});
}

// The inverse of sequence_to_heads.
torch::Tensor heads_to_sequence(const torch::Tensor& y, comm::ProcessGroup& g) {
  const int64_t n = g.size(), B = y.size(0), Hn = y.size(1), Tl = y.size(2) / n, D = y.size(3);
  auto send = y.reshape({B, Hn, n, Tl, D}).permute({2, 0, 1, 3, 4}).contiguous();
  auto recv = torch::empty_like(send);  // [head group, B, H/n, Tl, D]
  g.all_to_all(recv, send)->wait();
  return recv.permute({1, 0, 2, 3, 4}).reshape({B, n * Hn, Tl, D});
}

struct UlyssesAttention : Function<UlyssesAttention> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor q, torch::Tensor k,
                               torch::Tensor v, bool causal, int64_t handle) {
    auto& g = group_of(handle);
    const int n = g.size();
    auto qh = sequence_to_heads(q, g), kh = sequence_to_heads(k, g), vh = sequence_to_heads(v, g);
    const auto pos = positions_in_rank_order(qh.size(2), n);
    auto res = block_attention_forward(qh, kh, vh, pos, pos, causal, scale_of(q), {2 * n, 2 * n});
    ctx->save_for_backward({qh, kh, vh, res.out, res.lse});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["group"] = handle;
    return heads_to_sequence(res.out.to(q.scalar_type()), g);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &qh = saved[0], &kh = saved[1], &vh = saved[2], &out = saved[3], &lse = saved[4];
    auto& g = group_of(ctx->saved_data["group"].toInt());
    const int n = g.size();
    auto dout = sequence_to_heads(grads[0].to(torch::kFloat), g);
    const auto pos = positions_in_rank_order(qh.size(2), n);
    auto b = block_attention_backward(qh, kh, vh, pos, pos, ctx->saved_data["causal"].toBool(),
                                      scale_of(qh), dout, lse, (dout * out).sum(-1),
                                      {2 * n, 2 * n});
    return {heads_to_sequence(b.dq, g).to(qh.scalar_type()),
            heads_to_sequence(b.dk, g).to(kh.scalar_type()),
            heads_to_sequence(b.dv, g).to(vh.scalar_type()), torch::Tensor(), torch::Tensor()};
  }
};

// --- allgather -------------------------------------------------------------

// Every rank's keys and values, the sequence in rank order: [2, B, H, T, D].
torch::Tensor gathered_kv(const torch::Tensor& k, const torch::Tensor& v, comm::ProcessGroup& g) {
  auto kv = torch::stack({k, v}).contiguous();
  std::vector<torch::Tensor> parts;
  for (int i = 0; i < g.size(); ++i) parts.push_back(torch::empty_like(kv));
  g.all_gather(parts, kv)->wait();
  return torch::cat(parts, 3);
}

struct AllGatherAttention : Function<AllGatherAttention> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor q, torch::Tensor k,
                               torch::Tensor v, bool causal, int64_t handle) {
    auto& g = group_of(handle);
    const int n = g.size();
    const int64_t T = q.size(2) * n;
    auto kv = gathered_kv(k, v, g);
    auto res = block_attention_forward(q, kv[0], kv[1], context_parallel_positions(T, g.rank(), n),
                                       positions_in_rank_order(T, n), causal, scale_of(q),
                                       {2, 2 * n});
    // Only the local keys and values are kept: backward gathers them again.
    ctx->save_for_backward({q, k, v, res.out, res.lse});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["group"] = handle;
    return res.out.to(q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    auto& g = group_of(ctx->saved_data["group"].toInt());
    const int n = g.size();
    const int64_t T = q.size(2) * n;
    auto kv = gathered_kv(k, v, g);
    auto dout = grads[0].to(torch::kFloat);
    auto b = block_attention_backward(q, kv[0], kv[1], context_parallel_positions(T, g.rank(), n),
                                      positions_in_rank_order(T, n),
                                      ctx->saved_data["causal"].toBool(), scale_of(q), dout, lse,
                                      (dout * out).sum(-1), {2, 2 * n});
    // Every rank holds a partial gradient of every rank's keys and values: sum
    // them home. [2, B, H, n * Tl, D] -> [n, 2, B, H, Tl, D], rank-major.
    const int64_t Tl = q.size(2);
    auto dkv = torch::stack({b.dk, b.dv});
    auto sizes = dkv.sizes().vec();
    sizes[3] = Tl;
    sizes.insert(sizes.begin() + 3, n);  // [2, B, H, n, Tl, D]
    auto send = dkv.reshape(sizes).permute({3, 0, 1, 2, 4, 5}).contiguous();
    auto mine = torch::empty({2, q.size(0), q.size(1), Tl, q.size(3)}, send.options());
    g.reduce_scatter(mine, send)->wait();
    return {b.dq.to(q.scalar_type()), mine[0].to(k.scalar_type()), mine[1].to(v.scalar_type()),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void check_context_parallel_length(int64_t seq_len, int cp) {
  TS_CHECK_T(ConfigError, cp >= 1 && seq_len % (2 * cp) == 0, "context parallel: a sequence of ",
             seq_len, " tokens does not split into 2 * context_parallel_size = ", 2 * cp,
             " equal chunks; choose a sequence length divisible by ", 2 * cp);
}

torch::Tensor context_parallel_positions(int64_t seq_len, int rank, int cp) {
  check_context_parallel_length(seq_len, cp);
  TS_CHECK(rank >= 0 && rank < cp, "context parallel: rank ", rank, " outside a group of ", cp);
  const int64_t chunk = seq_len / (2 * cp);
  auto head = torch::arange(rank * chunk, (rank + 1) * chunk, torch::kLong);
  const int64_t tail_start = (2 * cp - 1 - rank) * chunk;
  return torch::cat({head, torch::arange(tail_start, tail_start + chunk, torch::kLong)});
}

torch::Tensor context_parallel_shard(const torch::Tensor& x, int64_t dim, int rank, int cp) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  check_context_parallel_length(x.size(d), cp);
  auto chunks = x.chunk(2 * cp, d);
  return torch::cat({chunks[rank], chunks[2 * cp - 1 - rank]}, d).contiguous();
}

torch::Tensor context_parallel_unshard(const std::vector<torch::Tensor>& shards, int64_t dim) {
  const int cp = static_cast<int>(shards.size());
  TS_CHECK(cp >= 1, "context_parallel_unshard: no shards");
  std::vector<torch::Tensor> chunks(2 * cp);
  for (int r = 0; r < cp; ++r) {
    auto halves = shards[r].chunk(2, dim);
    chunks[r] = halves[0];
    chunks[2 * cp - 1 - r] = halves[1];
  }
  return torch::cat(chunks, dim);
}

torch::Tensor context_parallel_attention(const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v, bool causal,
                                         const ContextParallelOptions& cp) {
  TS_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
           "context_parallel_attention: q, k and v must be [B, H, T/cp, D] with equal shapes, got ",
           q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  if (!cp.enabled()) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal);
  }
  const int n = cp.size();
  TS_CHECK(q.size(2) % 2 == 0, "context parallel: a rank's ", q.size(2),
           " tokens are not two equal chunks (the sequence must divide by 2 * cp = ", 2 * n, ")");
  const int64_t handle = group_handle(*cp.group);
  switch (cp.comm_type) {
    case CpCommType::kP2P: return RingAttention::apply(q, k, v, causal, handle);
    case CpCommType::kAllToAll:
      TS_CHECK_T(ConfigError, q.size(1) % n == 0, "cp_comm_type a2a splits the ", q.size(1),
                 " attention heads (per tensor-parallel rank) over context_parallel_size = ", n,
                 ", which does not divide them; use cp_comm_type p2p or allgather");
      return UlyssesAttention::apply(q, k, v, causal, handle);
    case CpCommType::kAllGather: return AllGatherAttention::apply(q, k, v, causal, handle);
  }
  return {};
}

}  // namespace tessera::parallel
