#include "tessera/data/auc.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "tessera/core/check.h"

namespace tessera::data {

double roc_auc(const at::Tensor& scores, const at::Tensor& labels) {
  TS_CHECK_T(ConfigError, scores.dim() == 1 && labels.dim() == 1 &&
                 scores.numel() == labels.numel(),
             "roc_auc: scores ", scores.sizes(), " and labels ", labels.sizes(),
             " must be 1-D of the same length");
  const at::Tensor s = scores.to(at::kDouble).contiguous();
  const at::Tensor y = labels.to(at::kDouble).contiguous();
  const double* sp = s.data_ptr<double>();
  const double* yp = y.data_ptr<double>();
  const auto n = static_cast<size_t>(s.numel());
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sp[a] < sp[b]; });
  double positives = 0, positive_rank_sum = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && sp[order[j]] == sp[order[i]]) ++j;
    // Ranks i+1 .. j (1-based) share their mean.
    const double rank = 0.5 * (static_cast<double>(i + 1) + static_cast<double>(j));
    for (size_t k = i; k < j; ++k) {
      const double label = yp[order[k]];
      TS_CHECK_T(ConfigError, label == 0.0 || label == 1.0, "roc_auc: label ", label,
                 " at index ", order[k], " is neither 0 nor 1");
      positives += label;
      positive_rank_sum += label * rank;
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  TS_CHECK_T(ConfigError, positives > 0 && negatives > 0, "roc_auc: needs both classes, got ",
             positives, " positives and ", negatives, " negatives");
  return (positive_rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

}  // namespace tessera::data
