#include "tessera/runtime/ddp/bucket_assignment.h"

#include <algorithm>
#include <map>

#include "tessera/core/check.h"

namespace tessera::runtime::ddp {

std::vector<Bucket> assign_buckets(const std::vector<ParamSpec>& params, int64_t cap_bytes,
                                   int64_t first_cap_bytes) {
  TS_CHECK_T(ConfigError, cap_bytes > 0, "bucket_cap_mb must be positive (got ", cap_bytes,
             " bytes)");
  TS_CHECK_T(ConfigError, first_cap_bytes > 0, "the first bucket cap must be positive (got ",
             first_cap_bytes, " bytes)");
  std::vector<Bucket> closed;
  // One open bucket per dtype: mixed-precision models keep each dtype contiguous.
  std::map<c10::ScalarType, Bucket> open;
  for (size_t k = params.size(); k-- > 0;) {
    const ParamSpec& p = params[k];
    if (p.numel <= 0) continue;
    const int64_t bytes = p.numel * static_cast<int64_t>(c10::elementSize(p.dtype));
    auto it = open.find(p.dtype);
    // A parameter larger than the cap gets a bucket of its own: the smaller ones
    // collected so far go out first instead of waiting for it.
    if (bytes >= (closed.empty() ? first_cap_bytes : cap_bytes) && it != open.end()) {
      closed.push_back(std::move(it->second));
      open.erase(it);
    }
    Bucket& b = open[p.dtype];
    b.dtype = p.dtype;
    b.params.push_back(k);
    b.numel += p.numel;
    const int64_t limit = closed.empty() ? first_cap_bytes : cap_bytes;
    if (b.numel * static_cast<int64_t>(c10::elementSize(p.dtype)) >= limit) {
      closed.push_back(std::move(b));
      open.erase(p.dtype);
    }
  }
  // Leftover partial buckets: the one whose first parameter comes latest in
  // registration order is expected to be ready first.
  std::vector<Bucket> rest;
  for (auto& kv : open) rest.push_back(std::move(kv.second));
  std::sort(rest.begin(), rest.end(),
            [](const Bucket& a, const Bucket& b) { return a.params[0] > b.params[0]; });
  for (auto& b : rest) closed.push_back(std::move(b));
  return closed;
}

}  // namespace tessera::runtime::ddp
