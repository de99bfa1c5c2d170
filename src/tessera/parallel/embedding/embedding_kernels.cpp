#include "tessera/parallel/embedding/embedding_kernels.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tessera/core/check.h"

namespace tessera::parallel {
namespace {

// Rows per initialization block: small enough that a shard of a few rows draws
// little, large enough that a big table is a few thousand generator calls.
constexpr int64_t kInitBlockRows = 4096;

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& name) {  // FNV-1a
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

void check_bags(const at::Tensor& lengths, const at::Tensor& rows, int64_t n) {
  TS_CHECK_EQ(lengths.numel(), n, "embedding bags: lengths per output row");
  TS_CHECK_T(ConfigError, lengths.scalar_type() == at::kLong && rows.scalar_type() == at::kLong,
             "embedding bags: lengths and ids must be int64, got ", lengths.scalar_type(), " and ",
             rows.scalar_type());
}

}  // namespace

at::Tensor pool_sums(const at::Tensor& weight, const at::Tensor& lengths, const at::Tensor& rows) {
  const int64_t n = lengths.numel();
  check_bags(lengths, rows, n);
  const at::Tensor w = weight.contiguous();
  const int64_t width = w.size(1);
  at::Tensor out = at::zeros({n, width}, at::kDouble);
  const float* wp = w.data_ptr<float>();
  const int64_t* lp = lengths.contiguous().data_ptr<int64_t>();
  const at::Tensor ids = rows.contiguous();
  const int64_t* ip = ids.data_ptr<int64_t>();
  double* op = out.data_ptr<double>();
  int64_t pos = 0;
  for (int64_t b = 0; b < n; ++b) {
    double* o = op + b * width;
    for (int64_t k = 0; k < lp[b]; ++k, ++pos) {
      const float* row = wp + ip[pos] * width;
      for (int64_t c = 0; c < width; ++c) o[c] += static_cast<double>(row[c]);
    }
  }
  TS_CHECK_EQ(pos, ids.numel(), "embedding bags: sum of lengths vs number of ids");
  return out;
}

at::Tensor finish_pooling(const at::Tensor& sums, const at::Tensor& lengths, PoolingType pooling) {
  if (pooling == PoolingType::kSum) return sums.to(at::kFloat);
  const at::Tensor len = lengths.to(at::kDouble).clamp_min(1).unsqueeze(1);
  return (sums / len).to(at::kFloat);
}

at::Tensor scale_output_grad(const at::Tensor& grad, const at::Tensor& lengths,
                             PoolingType pooling) {
  at::Tensor g = grad.to(at::kFloat).contiguous();
  if (pooling == PoolingType::kSum) return g;
  return (g / lengths.to(at::kFloat).clamp_min(1).unsqueeze(1)).contiguous();
}

RowGradients row_gradients(const at::Tensor& grad, const at::Tensor& lengths,
                           const at::Tensor& rows) {
  const int64_t n = lengths.numel();
  check_bags(lengths, rows, n);
  const at::Tensor g = grad.to(at::kFloat).contiguous();
  TS_CHECK_EQ(g.size(0), n, "embedding backward: gradient rows vs bags");
  const int64_t dim = g.size(1);
  const at::Tensor ids = rows.contiguous();
  const int64_t* ip = ids.data_ptr<int64_t>();
  const int64_t* lp = lengths.contiguous().data_ptr<int64_t>();
  // Occurrence -> its bag, then occurrences grouped by row (stable: bag order).
  std::vector<int64_t> bag_of(static_cast<size_t>(ids.numel()));
  for (int64_t b = 0, pos = 0; b < n; ++b) {
    for (int64_t k = 0; k < lp[b]; ++k) bag_of[static_cast<size_t>(pos++)] = b;
  }
  std::vector<int64_t> order(bag_of.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return ip[a] < ip[b]; });
  std::vector<int64_t> unique;
  std::vector<double> acc;
  const float* gp = g.data_ptr<float>();
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t row = ip[order[i]];
    if (unique.empty() || unique.back() != row) {
      unique.push_back(row);
      acc.resize(acc.size() + static_cast<size_t>(dim), 0.0);
    }
    double* a = acc.data() + (unique.size() - 1) * static_cast<size_t>(dim);
    const float* src = gp + bag_of[static_cast<size_t>(order[i])] * dim;
    for (int64_t c = 0; c < dim; ++c) a[c] += static_cast<double>(src[c]);
  }
  const auto u = static_cast<int64_t>(unique.size());
  RowGradients out;
  out.rows = at::tensor(unique, at::kLong).view({u});
  out.grads = at::from_blob(acc.data(), {u, dim}, at::kDouble).to(at::kFloat);
  return out;
}

void rowwise_adagrad_update(at::Tensor& weight, at::Tensor& accum, const RowGradients& g,
                            int64_t col_begin, const RowwiseAdagradOptions& options) {
  TS_INTERNAL_ASSERT(weight.is_contiguous() && accum.is_contiguous());
  const int64_t u = g.rows.numel();
  if (u == 0) return;
  const int64_t dim = g.grads.size(1);
  const int64_t width = weight.size(1);
  TS_CHECK_LE(col_begin + width, dim, "rowwise adagrad: shard columns vs gradient width");
  float* wp = weight.data_ptr<float>();
  float* ap = accum.data_ptr<float>();
  const float* gp = g.grads.data_ptr<float>();
  const int64_t* rp = g.rows.data_ptr<int64_t>();
  const auto lr = static_cast<float>(options.lr);
  const auto eps = static_cast<float>(options.eps);
  for (int64_t i = 0; i < u; ++i) {
    const float* gr = gp + i * dim;
    double squares = 0;
    for (int64_t c = 0; c < dim; ++c) squares += static_cast<double>(gr[c]) * gr[c];
    float& a = ap[rp[i]];
    a += static_cast<float>(squares / static_cast<double>(dim));
    const float scale = lr / (std::sqrt(a) + eps);
    float* wr = wp + rp[i] * width;
    for (int64_t c = 0; c < width; ++c) wr[c] -= scale * gr[col_begin + c];
  }
}

at::Tensor init_table_block(const EmbeddingTableConfig& table, uint64_t seed, int64_t row_begin,
                            int64_t row_end, int64_t col_begin, int64_t col_end) {
  TS_INTERNAL_ASSERT(0 <= row_begin && row_begin <= row_end && row_end <= table.rows);
  TS_INTERNAL_ASSERT(0 <= col_begin && col_begin <= col_end && col_end <= table.dim);
  at::Tensor out = at::empty({row_end - row_begin, col_end - col_begin}, at::kFloat);
  const double bound = 1.0 / std::sqrt(static_cast<double>(table.rows));
  const uint64_t table_seed = mix(seed ^ mix(name_hash(table.name)));
  for (int64_t block = row_begin / kInitBlockRows; block * kInitBlockRows < row_end; ++block) {
    const int64_t b0 = block * kInitBlockRows;
    const int64_t b1 = std::min(b0 + kInitBlockRows, table.rows);
    auto gen =
        at::make_generator<at::CPUGeneratorImpl>(mix(table_seed + static_cast<uint64_t>(block)));
    at::Tensor values = at::empty({b1 - b0, table.dim}, at::kFloat).uniform_(-bound, bound, gen);
    const int64_t r0 = std::max(b0, row_begin), r1 = std::min(b1, row_end);
    out.narrow(0, r0 - row_begin, r1 - r0)
        .copy_(values.narrow(0, r0 - b0, r1 - r0).narrow(1, col_begin, col_end - col_begin));
  }
  return out;
}

void EmbeddingTableConfig::validate() const {
  TS_CHECK_T(ConfigError, !name.empty(), "an embedding table needs a name");
  TS_CHECK_T(ConfigError, rows > 0 && dim > 0, "embedding table '", name, "' has ", rows,
             " rows of dim ", dim, ": both must be positive");
}

void JaggedIds::validate(const std::string& table, int64_t rows) const {
  TS_CHECK_T(ConfigError, lengths.defined() && values.defined() && lengths.dim() == 1 &&
                 values.dim() == 1 && lengths.scalar_type() == at::kLong &&
                 values.scalar_type() == at::kLong,
             "ids of table '", table, "': lengths and values must be 1-D int64 tensors");
  const int64_t total = lengths.numel() == 0 ? 0 : lengths.sum().item<int64_t>();
  const bool non_negative = lengths.numel() == 0 || lengths.min().item<int64_t>() >= 0;
  TS_CHECK_T(ConfigError, total == values.numel() && non_negative,
             "ids of table '", table, "': lengths add up to ", total, " but there are ",
             values.numel(), " ids (lengths must be >= 0)");
  if (values.numel() > 0) {
    const int64_t lo = values.min().item<int64_t>(), hi = values.max().item<int64_t>();
    TS_CHECK_T(ConfigError, lo >= 0 && hi < rows, "ids of table '", table, "' range over [", lo,
               ", ", hi, "] but the table has ", rows, " rows");
  }
}

}  // namespace tessera::parallel
