// Precompiled header for targets that use the torch frontend (torch::nn, optim,
// autograd): models, runtime, parallel, and their tests.
#pragma once

#include <torch/torch.h>
