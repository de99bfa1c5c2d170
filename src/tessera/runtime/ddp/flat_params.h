// Parameters laid end to end in one flat tensor per dtype: what local SGD's
// parameter averaging and delayed averaging all-reduce. Tensors are detached
// views of the parameters; writes go into the parameters' own storage.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <vector>

namespace tessera::runtime::ddp {

// The parameters grouped by dtype, each group in the order given.
inline std::vector<std::vector<at::Tensor>> group_by_dtype(const std::vector<at::Tensor>& params) {
  std::vector<std::vector<at::Tensor>> groups;
  std::map<at::ScalarType, size_t> index;
  for (const auto& p : params) {
    auto [it, added] = index.emplace(p.scalar_type(), groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(p.detach());
  }
  return groups;
}

// One dtype group laid end to end (a new tensor).
inline at::Tensor flatten(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> parts;
  parts.reserve(params.size());
  for (const auto& p : params) parts.push_back(p.reshape({-1}));
  return at::cat(parts);
}

// Copies `flat` (laid out by flatten) back into the parameters.
inline void unflatten_into(const at::Tensor& flat, std::vector<at::Tensor>& params) {
  int64_t at = 0;
  for (auto& p : params) {
    p.copy_(flat.narrow(0, at, p.numel()).view(p.sizes()));
    at += p.numel();
  }
}

}  // namespace tessera::runtime::ddp
