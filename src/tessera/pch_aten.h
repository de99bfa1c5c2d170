// Precompiled header for targets that need tensors but not torch::nn (core, comm,
// data, checkpoint, cli): ATen alone loads in ~2.5 s per TU, torch/torch.h in ~10.
#pragma once

#include <ATen/ATen.h>
