#include "tessera/parallel/expert/expert_parallel.h"

#include <numeric>

#include "tessera/core/check.h"
#include "tessera/parallel/group_handle.h"
#include "tessera/parallel/tensor/tp_ops.h"

namespace tessera::parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

std::vector<int64_t> times(const std::vector<int64_t>& rows, int64_t width) {
  std::vector<int64_t> out;
  for (int64_t r : rows) out.push_back(r * width);
  return out;
}

torch::Tensor exchange_rows(const torch::Tensor& rows, const std::vector<int64_t>& send,
                            const std::vector<int64_t>& recv, comm::ProcessGroup& g) {
  // Elements per row from the shape: a rank may send no rows at all.
  int64_t width = 1;
  for (int64_t d = 1; d < rows.dim(); ++d) width *= rows.size(d);
  auto shape = rows.sizes().vec();
  shape[0] = std::accumulate(recv.begin(), recv.end(), int64_t{0});
  auto in = rows.contiguous();
  auto out = torch::empty(shape, in.options());
  g.all_to_all(out, in, times(recv, width), times(send, width))->wait();
  return out;
}

// The splits travel through the graph as IValues, the group as a handle
// (group_handle.h).
struct AllToAllV : Function<AllToAllV> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor rows, std::vector<int64_t> send,
                               std::vector<int64_t> recv, int64_t group) {
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    ctx->saved_data["group"] = group;
    return exchange_rows(rows, send, recv, group_from_handle(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto& g = group_from_handle(ctx->saved_data["group"].toInt());
    return {exchange_rows(grads[0], ctx->saved_data["recv"].toIntVector(),
                          ctx->saved_data["send"].toIntVector(), g),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

std::vector<int64_t> to_vector(const torch::Tensor& t) {
  auto c = t.to(torch::kCPU).to(torch::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

}  // namespace

torch::Tensor all_to_all_v(const torch::Tensor& rows, const std::vector<int64_t>& send_rows,
                           const std::vector<int64_t>& recv_rows, comm::ProcessGroup& group) {
  const auto n = static_cast<size_t>(group.size());
  TS_CHECK(send_rows.size() == n && recv_rows.size() == n, "all_to_all_v: ", send_rows.size(),
           " send and ", recv_rows.size(), " receive splits for a group of ", n);
  TS_CHECK(std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0}) == rows.size(0),
           "all_to_all_v: the send splits do not add up to the ", rows.size(0), " rows");
  return AllToAllV::apply(rows, send_rows, recv_rows, group_handle(group));
}

torch::Tensor exchange_counts(const torch::Tensor& counts, comm::ProcessGroup& group) {
  auto in = counts.to(torch::kCPU).to(torch::kLong).contiguous();
  TS_CHECK(in.numel() % group.size() == 0, "exchange_counts: ", in.numel(),
           " counts do not split over ", group.size(), " ranks");
  auto out = torch::empty_like(in);
  group.all_to_all(out, in)->wait();
  return out;
}

torch::Tensor AllToAllDispatcher::dispatch(const torch::Tensor& tokens,
                                           const models::Routing& routing,
                                           models::ExpertsImpl& experts) {
  comm::ProcessGroup& g = *group_;
  const int64_t n = g.size(), local = experts.local_experts();
  // Every kept assignment, grouped by expert: experts are contiguous per rank,
  // so this is grouped by destination too.
  auto all = models::group_by_expert(routing, 0, n * local);
  auto send_by_expert = all.counts.view({n, local});
  auto recv_by_expert = exchange_counts(all.counts, g).view({n, local});  // [src, local expert]
  const auto send_rows = to_vector(send_by_expert.sum(1));
  const auto recv_rows = to_vector(recv_by_expert.sum(1));
  auto received = all_to_all_v(tokens.index_select(0, all.token), send_rows, recv_rows, g);
  // Received rows are source-major; the experts want them expert-major.
  std::vector<int64_t> order;
  std::vector<int64_t> src_start(static_cast<size_t>(n), 0);
  for (int64_t s = 1; s < n; ++s) src_start[s] = src_start[s - 1] + recv_rows[s - 1];
  auto counts = recv_by_expert.accessor<int64_t, 2>();
  for (int64_t e = 0; e < local; ++e) {
    for (int64_t s = 0; s < n; ++s) {
      int64_t at = src_start[s];
      for (int64_t j = 0; j < e; ++j) at += counts[s][j];
      for (int64_t i = 0; i < counts[s][e]; ++i) order.push_back(at + i);
    }
  }
  auto index = torch::tensor(order, torch::kLong).to(tokens.device());
  auto out_local = experts.forward(received.index_select(0, index), recv_by_expert.sum(0));
  auto back = torch::zeros_like(received).index_copy(0, index, out_local);
  auto returned = all_to_all_v(back, recv_rows, send_rows, g);
  return torch::zeros_like(tokens).index_add(
      0, all.token, returned * all.weight.to(returned.scalar_type()).unsqueeze(1));
}

torch::Tensor AllGatherDispatcher::dispatch(const torch::Tensor& tokens,
                                            const models::Routing& routing,
                                            models::ExpertsImpl& experts) {
  comm::ProcessGroup& g = *group_;
  // Every rank's tokens and routing; the weights and tokens differentiably
  // (their gradients reduce-scatter back), the choices as plain data.
  auto gathered = [&](const torch::Tensor& t) {
    return gather_from_sequence(t.unsqueeze(0), g).squeeze(0);
  };
  auto plain = [&](const torch::Tensor& t) {
    auto in = t.contiguous();
    auto shape = in.sizes().vec();
    shape[0] *= g.size();
    auto out = torch::empty(shape, in.options());
    g.all_gather_into(out, in)->wait();
    return out;
  };
  models::Routing all;
  all.expert = plain(routing.expert);
  all.kept = plain(routing.kept.to(torch::kUInt8)).to(torch::kBool);
  all.weight = gathered(routing.weight);
  auto x = gathered(tokens);
  auto mine = models::group_by_expert(all, experts.first_expert(), experts.local_experts());
  auto y = experts.forward(x.index_select(0, mine.token), mine.counts);
  auto partial = torch::zeros_like(x).index_add(
      0, mine.token, y * mine.weight.to(y.scalar_type()).unsqueeze(1));
  return reduce_scatter_to_sequence(partial.unsqueeze(0), g).squeeze(0);
}

std::shared_ptr<models::TokenDispatcher> make_token_dispatcher(
    TokenDispatcherType type, std::shared_ptr<comm::ProcessGroup> group) {
  if (type == TokenDispatcherType::kAllGather) {
    return std::make_shared<AllGatherDispatcher>(std::move(group));
  }
  return std::make_shared<AllToAllDispatcher>(std::move(group));
}

}  // namespace tessera::parallel
