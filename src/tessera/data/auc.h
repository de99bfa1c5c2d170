// ROC AUC of scores against binary labels, exactly: the probability that a random
// positive scores above a random negative, ties counted as one half — computed
// from ranks (Mann-Whitney U), with tied scores sharing their average rank.
// O(n log n); no approximation by buckets. Used to evaluate click models
// (`tessera train --task dlrm`).
#pragma once

#include <ATen/core/Tensor.h>

namespace tessera::data {

// scores and labels: 1-D, the same length; labels are 0 or 1 (any dtype).
// ConfigError when the lengths differ, a label is neither 0 nor 1, or one class
// is missing (the AUC is undefined then).
double roc_auc(const at::Tensor& scores, const at::Tensor& labels);

}  // namespace tessera::data
