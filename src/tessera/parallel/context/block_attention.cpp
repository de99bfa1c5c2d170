#include "tessera/parallel/context/block_attention.h"

#include <limits>

#include "tessera/core/check.h"

namespace tessera::parallel {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Every key of the piece lies after every query: nothing to compute.
bool hidden(const torch::Tensor& q_pos, const torch::Tensor& k_pos, bool causal) {
  return causal && k_pos.min().item<int64_t>() > q_pos.max().item<int64_t>();
}

// Every key of the piece is at or before every query: no mask needed.
bool visible(const torch::Tensor& q_pos, const torch::Tensor& k_pos, bool causal) {
  return !causal || k_pos.max().item<int64_t>() <= q_pos.min().item<int64_t>();
}

// exp(s - lse) with rows whose lse is -inf (no key seen) giving 0, not NaN.
torch::Tensor probabilities(const torch::Tensor& scores, const torch::Tensor& lse) {
  auto finite = torch::where(torch::isinf(lse), torch::zeros_like(lse), lse);
  return torch::exp(scores - finite.unsqueeze(-1));
}

torch::Tensor scores_of(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& q_pos,
                        const torch::Tensor& k_pos, bool causal, double scale) {
  auto s = torch::matmul(q, k.transpose(-2, -1)) * scale;
  if (!visible(q_pos, k_pos, causal)) {
    auto future = (k_pos.unsqueeze(0) > q_pos.unsqueeze(1)).to(s.device());  // [Tq, Tk]
    s.masked_fill_(future, kNegInf);
  }
  return s;
}

std::vector<torch::Tensor> pieces_of(const torch::Tensor& x, int64_t n, int64_t dim) {
  TS_CHECK(x.size(dim) % n == 0, "block attention: a length of ", x.size(dim),
           " does not split into ", n, " pieces");
  return x.chunk(n, dim);
}

}  // namespace

BlockAttentionResult block_attention_forward(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                             const torch::Tensor& v_in, const torch::Tensor& q_pos,
                                             const torch::Tensor& k_pos, bool causal, double scale,
                                             BlockPieces pieces) {
  auto q = q_in.to(torch::kFloat), k = k_in.to(torch::kFloat), v = v_in.to(torch::kFloat);
  auto qs = pieces_of(q, pieces.q, 2), qp = pieces_of(q_pos, pieces.q, 0);
  auto ks = pieces_of(k, pieces.k, 2), vs = pieces_of(v, pieces.k, 2);
  auto kp = pieces_of(k_pos, pieces.k, 0);
  std::vector<torch::Tensor> outs, lses;
  for (size_t i = 0; i < qs.size(); ++i) {
    BlockAttentionResult acc;
    for (size_t j = 0; j < ks.size(); ++j) {
      if (hidden(qp[i], kp[j], causal)) continue;
      auto s = scores_of(qs[i], ks[j], qp[i], kp[j], causal, scale);
      auto lse = torch::logsumexp(s, -1);
      merge_attention_blocks(acc, {torch::matmul(probabilities(s, lse), vs[j]), lse});
    }
    if (!acc.out.defined()) {
      acc.out = torch::zeros_like(qs[i]);
      acc.lse = torch::full({q.size(0), q.size(1), qs[i].size(2)}, kNegInf, q.options());
    }
    outs.push_back(acc.out);
    lses.push_back(acc.lse);
  }
  if (outs.size() == 1) return {outs[0], lses[0]};
  return {torch::cat(outs, 2), torch::cat(lses, 2)};
}

void merge_attention_blocks(BlockAttentionResult& acc, const BlockAttentionResult& block) {
  if (!acc.out.defined()) {
    acc = block;
    return;
  }
  auto lse = torch::logaddexp(acc.lse, block.lse);
  auto finite = torch::where(torch::isinf(lse), torch::zeros_like(lse), lse);
  auto w_acc = torch::exp(acc.lse - finite).unsqueeze(-1);
  auto w_block = torch::exp(block.lse - finite).unsqueeze(-1);
  acc.out = acc.out * w_acc + block.out * w_block;
  acc.lse = lse;
}

BlockAttentionGrads block_attention_backward(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                             const torch::Tensor& v_in, const torch::Tensor& q_pos,
                                             const torch::Tensor& k_pos, bool causal, double scale,
                                             const torch::Tensor& dout, const torch::Tensor& lse,
                                             const torch::Tensor& delta, BlockPieces pieces) {
  auto q = q_in.to(torch::kFloat), k = k_in.to(torch::kFloat), v = v_in.to(torch::kFloat);
  BlockAttentionGrads g{torch::zeros_like(q), torch::zeros_like(k), torch::zeros_like(v)};
  // Pieces of the gradients are views: accumulating into them fills g in place.
  auto qs = pieces_of(q, pieces.q, 2), qp = pieces_of(q_pos, pieces.q, 0);
  auto dos = pieces_of(dout, pieces.q, 2), ls = pieces_of(lse, pieces.q, 2);
  auto ds_ = pieces_of(delta, pieces.q, 2), dqs = pieces_of(g.dq, pieces.q, 2);
  auto ks = pieces_of(k, pieces.k, 2), vs = pieces_of(v, pieces.k, 2);
  auto kp = pieces_of(k_pos, pieces.k, 0);
  auto dks = pieces_of(g.dk, pieces.k, 2), dvs = pieces_of(g.dv, pieces.k, 2);
  for (size_t i = 0; i < qs.size(); ++i) {
    for (size_t j = 0; j < ks.size(); ++j) {
      if (hidden(qp[i], kp[j], causal)) continue;
      auto p = probabilities(scores_of(qs[i], ks[j], qp[i], kp[j], causal, scale), ls[i]);
      dvs[j].add_(torch::matmul(p.transpose(-2, -1), dos[i]));
      auto ds = p * (torch::matmul(dos[i], vs[j].transpose(-2, -1)) - ds_[i].unsqueeze(-1));
      dqs[i].add_(torch::matmul(ds, ks[j]), scale);
      dks[j].add_(torch::matmul(ds.transpose(-2, -1), qs[i]), scale);
    }
  }
  return g;
}

}  // namespace tessera::parallel
