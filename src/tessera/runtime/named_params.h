// NamedParams: the parameters an optimizer steps, each with its dotted module name
// ("h.0.attn.c_attn.weight"), in the optimizer's order (group by group). Names are
// what checkpoints and parameter-group patterns refer to. A plain value.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace tessera::runtime {

struct NamedParams {
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
};

}  // namespace tessera::runtime
