#include "tessera/data/click_dataset.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <numeric>

#include "tessera/core/check.h"

namespace tessera::data {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

// The hidden effect of id `id` of feature `f`: N(0, std) from a hash.
double id_effect(uint64_t seed, int64_t f, int64_t id, double std) {
  const uint64_t h = mix(seed ^ mix(static_cast<uint64_t>(f) * 0x100000001b3ULL +
                                    static_cast<uint64_t>(id)));
  const double u1 = unit(h), u2 = unit(mix(h));
  return std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
}

// Popularity rank k -> row: a fixed bijection (multiplication by a number coprime
// with the cardinality, plus an offset) so popular rows spread over row ranges.
int64_t scatter(int64_t k, int64_t rows, int64_t f) {
  int64_t a = 1000003 % rows;
  while (a == 0 || std::gcd(a, rows) != 1) ++a;
  return static_cast<int64_t>((static_cast<unsigned __int128>(k) * static_cast<uint64_t>(a) +
                               static_cast<uint64_t>(f) * 7919u) %
                              static_cast<uint64_t>(rows));
}

}  // namespace

void ClickDatasetOptions::validate() const {
  TS_CHECK_T(ConfigError, samples > 0 && dense_features >= 4, "click dataset: samples (",
             samples, ") must be positive and dense_features (", dense_features,
             ") at least 4, the hidden model uses x0..x3");
  TS_CHECK_T(ConfigError, !cardinalities.empty(), "click dataset: cardinalities must list "
             "one table size per sparse feature");
  for (int64_t c : cardinalities) {
    TS_CHECK_T(ConfigError, c > 0, "click dataset: cardinality ", c, " must be positive");
  }
  TS_CHECK_T(ConfigError, max_ids_per_feature >= 1, "click dataset: max_ids_per_feature ",
             max_ids_per_feature, " must be at least 1");
  TS_CHECK_T(ConfigError, signal_features >= 0 &&
                 signal_features <= static_cast<int64_t>(cardinalities.size()),
             "click dataset: signal_features ", signal_features, " must be within the ",
             cardinalities.size(), " sparse features");
}

ClickDataset ClickDataset::generate(const ClickDatasetOptions& options) {
  options.validate();
  ClickDataset d;
  d.options_ = options;
  const int64_t n = options.samples;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  d.dense_ = at::randn({n, options.dense_features}, gen, at::kFloat);
  const at::Tensor x = d.dense_.to(at::kDouble);
  at::Tensor logit = options.bias + 0.8 * x.select(1, 0) - 0.6 * x.select(1, 1) +
                     0.5 * x.select(1, 2) * x.select(1, 3);
  double* lp = logit.data_ptr<double>();
  for (size_t f = 0; f < options.cardinalities.size(); ++f) {
    const int64_t rows = options.cardinalities[f];
    at::Tensor lengths = at::randint(1, options.max_ids_per_feature + 1, {n}, gen, at::kLong);
    const int64_t total = lengths.sum().item<int64_t>();
    // log-uniform popularity ranks: P(k) ~ 1/(k+1) over [0, rows)
    const at::Tensor u = at::rand({total}, gen, at::kDouble);
    const at::Tensor rank = (at::exp(u * std::log(static_cast<double>(rows) + 1)) - 1)
                                .floor().to(at::kLong).clamp(0, rows - 1);
    at::Tensor ids = at::empty({total}, at::kLong);
    const int64_t* rp = rank.data_ptr<int64_t>();
    int64_t* ip = ids.data_ptr<int64_t>();
    for (int64_t i = 0; i < total; ++i) ip[i] = scatter(rp[i], rows, static_cast<int64_t>(f));
    if (static_cast<int64_t>(f) < options.signal_features) {
      const int64_t* len = lengths.data_ptr<int64_t>();
      for (int64_t s = 0, pos = 0; s < n; ++s) {
        double effect = 0;
        for (int64_t k = 0; k < len[s]; ++k, ++pos) {
          effect += id_effect(options.seed, static_cast<int64_t>(f), ip[pos],
                              options.id_effect_std);
        }
        lp[s] += effect / static_cast<double>(len[s]);
      }
    }
    d.offsets_.push_back(at::cat({at::zeros({1}, at::kLong), lengths.cumsum(0)}));
    d.lengths_.push_back(lengths);
    d.ids_.push_back(ids);
  }
  d.probability_ = at::sigmoid(logit).to(at::kFloat);
  d.labels_ = (at::rand({n}, gen, at::kDouble) < at::sigmoid(logit)).to(at::kFloat);
  return d;
}

ClickBatch ClickDataset::batch(int64_t begin, int64_t end) const {
  TS_CHECK_T(ConfigError, 0 <= begin && begin <= end && end <= size(), "click dataset: samples [",
             begin, ", ", end, ") are outside the ", size(), " samples");
  ClickBatch b;
  b.dense = dense_.narrow(0, begin, end - begin);
  b.labels = labels_.narrow(0, begin, end - begin);
  for (size_t f = 0; f < ids_.size(); ++f) {
    const int64_t v0 = offsets_[f][begin].item<int64_t>(), v1 = offsets_[f][end].item<int64_t>();
    b.lengths.push_back(lengths_[f].narrow(0, begin, end - begin));
    b.ids.push_back(ids_[f].narrow(0, v0, v1 - v0));
  }
  return b;
}

}  // namespace tessera::data
