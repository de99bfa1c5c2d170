#include "tessera/runtime/ddp/powersgd_hook.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "tessera/core/check.h"

namespace tessera::runtime::ddp {
namespace {

bool worth_compressing(int64_t rows, int64_t cols, int64_t rank, double min_rate) {
  return static_cast<double>((rows + cols) * rank) * min_rate < static_cast<double>(rows * cols);
}

at::Tensor matrix(const at::Tensor& flat, int64_t offset, std::pair<int64_t, int64_t> dims) {
  return flat.narrow(0, offset, dims.first * dims.second).view({dims.first, dims.second});
}

}  // namespace

void orthogonalize_columns(at::Tensor& m, double epsilon) {
  const int64_t r = m.size(1);
  for (int64_t i = 0; i < r; ++i) {
    auto col = m.narrow(1, i, 1);
    const double norm = col.norm().item<double>();
    col.div_(epsilon == 0 ? norm : norm + epsilon);
    if (i + 1 < r) {
      auto rest = m.narrow(1, i + 1, r - i - 1);
      rest.sub_(col * (col * rest).sum(0, /*keepdim=*/true));
    }
  }
}

PowerSgdReduction::PowerSgdReduction(PowerSgdOptions options, std::vector<BucketLayout> layouts)
    : options_(options) {
  TS_CHECK_T(ConfigError, options_.matrix_approximation_rank >= 1,
             "powersgd.matrix_approximation_rank must be >= 1, got ",
             options_.matrix_approximation_rank);
  TS_CHECK_T(ConfigError, options_.start_powersgd_iter >= 0,
             "powersgd.start_powersgd_iter must be >= 0, got ", options_.start_powersgd_iter);
  for (auto& layout : layouts) {
    BucketState s;
    for (const auto& shape : layout.shapes) {
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      const int64_t rows = shape.size() >= 2 ? shape[0] : 1;
      const int64_t cols = rows > 0 ? numel / rows : 0;
      s.dims.emplace_back(rows, cols);
      // Vectors (biases, norms) stay whole, as in PyTorch.
      s.compress.push_back(shape.size() >= 2 && worth_compressing(rows, cols,
                                                                  options_.matrix_approximation_rank,
                                                                  options_.min_compression_rate));
    }
    s.qs.resize(layout.shapes.size());
    s.layout = std::move(layout);
    buckets_.push_back(std::move(s));
  }
}

at::Tensor PowerSgdReduction::initial_q(BucketState& s, size_t bucket, size_t k) {
  if (options_.warm_start && s.qs[k].defined()) {
    // As PyTorch's hook: the last reduction's Q = M^T P, orthogonalized again
    // before P = M Q (at rank 1 only a normalization; at higher ranks it keeps
    // the columns of P = M Q from collapsing onto the top singular direction).
    orthogonalize_columns(s.qs[k], options_.orthogonalization_epsilon);
    return s.qs[k];
  }
  // The same draw on every rank: seeded by the options, the bucket and the parameter.
  auto gen = at::detail::createCPUGenerator(options_.random_seed + 1000003 * bucket + 7919 * k +
                                            (options_.warm_start ? 0 : static_cast<uint64_t>(s.reductions)));
  auto q = at::randn({s.dims[k].second, options_.matrix_approximation_rank}, gen, at::kFloat);
  orthogonalize_columns(q, options_.orthogonalization_epsilon);
  return q;
}

void PowerSgdReduction::launch(comm::ProcessGroup& group, size_t bucket, const at::Tensor& flat) {
  BucketState& s = buckets_.at(bucket);
  TS_INTERNAL_ASSERT(!s.work, "a PowerSGD reduction of bucket ", bucket, " is in flight");
  at::NoGradGuard no_grad;
  s.plain = s.reductions < options_.start_powersgd_iter;
  if (s.plain) {
    s.work = group.all_reduce(flat, comm::ReduceOp::kAvg);
    return;
  }
  at::Tensor m_flat = flat;
  if (options_.use_error_feedback) {
    if (!s.error.defined()) s.error = at::zeros_like(flat);
    m_flat.add_(s.error);
    s.input = m_flat.clone();
  }
  std::vector<at::Tensor> parts;
  for (size_t k = 0; k < s.compress.size(); ++k) {
    if (s.compress[k]) continue;
    const auto [rows, cols] = s.dims[k];
    parts.push_back(m_flat.narrow(0, s.layout.offsets[k], rows * cols));
  }
  for (size_t k = 0; k < s.compress.size(); ++k) {
    if (!s.compress[k]) continue;
    s.qs[k] = initial_q(s, bucket, k);
    parts.push_back(at::mm(matrix(m_flat, s.layout.offsets[k], s.dims[k]), s.qs[k]).reshape({-1}));
  }
  s.packed = parts.empty() ? at::zeros({0}, flat.options()) : at::cat(parts);
  s.work = group.all_reduce(s.packed, comm::ReduceOp::kSum);
}

void PowerSgdReduction::finish(comm::ProcessGroup& group, size_t bucket, at::Tensor& flat) {
  BucketState& s = buckets_.at(bucket);
  comm::WorkHandle work = std::move(s.work);
  s.work = nullptr;
  if (work) work->wait();
  ++s.reductions;
  if (s.plain) return;
  at::NoGradGuard no_grad;
  const double world = static_cast<double>(group.size());
  const int64_t r = options_.matrix_approximation_rank;
  // The uncompressed parameters: their average.
  int64_t at = 0;
  for (size_t k = 0; k < s.compress.size(); ++k) {
    if (s.compress[k]) continue;
    const int64_t n = s.dims[k].first * s.dims[k].second;
    flat.narrow(0, s.layout.offsets[k], n).copy_(s.packed.narrow(0, at, n)).div_(world);
    at += n;
  }
  // Second power-iteration half: Q = M^T P with the summed, orthogonalized P.
  std::vector<at::Tensor> ps, q_parts;
  for (size_t k = 0; k < s.compress.size(); ++k) {
    if (!s.compress[k]) continue;
    auto p = s.packed.narrow(0, at, s.dims[k].first * r).view({s.dims[k].first, r});
    at += s.dims[k].first * r;
    orthogonalize_columns(p, options_.orthogonalization_epsilon);
    q_parts.push_back(at::mm(matrix(flat, s.layout.offsets[k], s.dims[k]).t(), p).reshape({-1}));
    ps.push_back(p);
  }
  if (!q_parts.empty()) {
    auto qs = at::cat(q_parts);
    group.all_reduce(qs, comm::ReduceOp::kSum)->wait();
    int64_t q_at = 0;
    size_t j = 0;
    for (size_t k = 0; k < s.compress.size(); ++k) {
      if (!s.compress[k]) continue;
      const int64_t cols = s.dims[k].second;
      s.qs[k] = qs.narrow(0, q_at, cols * r).view({cols, r}).clone();
      q_at += cols * r;
      matrix(flat, s.layout.offsets[k], s.dims[k]).copy_(at::mm(ps[j++], s.qs[k].t())).div_(world);
    }
  }
  if (options_.use_error_feedback) {
    s.error = s.input - flat;
    // Parameters sent whole have no compression error: their (local - average)
    // would only grow step after step and cancel in the sum.
    for (size_t k = 0; k < s.compress.size(); ++k) {
      if (!s.compress[k]) s.error.narrow(0, s.layout.offsets[k], s.dims[k].first * s.dims[k].second).zero_();
    }
  }
  s.input = at::Tensor();
  s.packed = at::Tensor();
}

void PowerSgdReduction::abandon() noexcept {
  for (auto& s : buckets_) {
    try {
      if (s.work) s.work->wait();
    } catch (...) {
    }
    s.work = nullptr;
  }
}

}  // namespace tessera::runtime::ddp
