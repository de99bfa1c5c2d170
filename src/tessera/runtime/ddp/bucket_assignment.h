// Bucket assignment for data-parallel gradient reduction: which parameters share
// one flat gradient buffer (one all_reduce).
//
// Parameters are walked in reverse registration order, because backward produces
// the gradients of the last layers first: a bucket made of the last parameters is
// complete early and its all_reduce overlaps the rest of backward. A bucket holds
// one dtype only. The first bucket is kept small (1 MiB by default, as PyTorch's
// DDP does) so communication starts as soon as possible; later buckets are filled
// up to the cap. A parameter larger than the cap gets a bucket of its own.
//
// Pure function, no state: safe from any thread.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

namespace tessera::runtime::ddp {

// What the assignment needs to know about one parameter.
struct ParamSpec {
  int64_t numel = 0;
  c10::ScalarType dtype = c10::kFloat;
};

struct Bucket {
  std::vector<size_t> params;  // indices into the parameter list, in fill order
  int64_t numel = 0;
  c10::ScalarType dtype = c10::kFloat;
};

constexpr int64_t kDefaultBucketCapBytes = 25ll << 20;
constexpr int64_t kDefaultFirstBucketCapBytes = 1ll << 20;

// Buckets in launch order (the order gradients are expected to become ready).
// Every parameter with numel > 0 appears in exactly one bucket; empty parameters
// are skipped. Caps must be positive (ConfigError otherwise).
std::vector<Bucket> assign_buckets(const std::vector<ParamSpec>& params,
                                   int64_t cap_bytes = kDefaultBucketCapBytes,
                                   int64_t first_cap_bytes = kDefaultFirstBucketCapBytes);

}  // namespace tessera::runtime::ddp
