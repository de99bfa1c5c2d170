#include "tessera/parallel/tensor/dropout_rng.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "tessera/core/check.h"

namespace tessera::parallel {
namespace {

// splitmix64: spreads nearby coordinates over the whole seed space.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t seed_of(uint64_t seed, uint64_t stream, int tp, int dp, int pp) {
  uint64_t h = mix(seed ^ mix(stream));
  h = mix(h ^ static_cast<uint64_t>(dp));
  h = mix(h ^ (static_cast<uint64_t>(pp) << 20));
  return mix(h ^ (static_cast<uint64_t>(tp) << 40));
}

torch::Tensor state_of(const at::Generator& g) {
  std::lock_guard<std::mutex> lock(const_cast<at::Generator&>(g).mutex());
  return g.get_state();
}

}  // namespace

DropoutRng::DropoutRng(uint64_t seed, int tp_rank, int dp_rank, int pp_rank)
    : replicated_(at::detail::createCPUGenerator(seed_of(seed, 1, 0, dp_rank, pp_rank))),
      split_(at::detail::createCPUGenerator(seed_of(seed, 2, tp_rank, dp_rank, pp_rank))) {}

torch::Tensor DropoutRng::state() const {
  return torch::cat({state_of(replicated_), state_of(split_)});
}

void DropoutRng::set_state(const torch::Tensor& state) {
  const torch::Tensor one = state_of(replicated_);
  TS_CHECK_T(CheckpointError, state.dim() == 1 && state.numel() == 2 * one.numel() &&
                                  state.scalar_type() == one.scalar_type(),
             "dropout RNG state of shape ", state.sizes(), " does not fit this build's generators (",
             2 * one.numel(), " bytes)");
  {
    std::lock_guard<std::mutex> lock(replicated_.mutex());
    replicated_.set_state(state.narrow(0, 0, one.numel()).clone());
  }
  std::lock_guard<std::mutex> lock(split_.mutex());
  split_.set_state(state.narrow(0, one.numel(), one.numel()).clone());
}

torch::Tensor dropout_from(const torch::Tensor& x, double p, bool training, at::Generator& gen) {
  if (!training || p == 0.0) return x;
  TS_CHECK(p > 0.0 && p < 1.0, "dropout probability must be in [0, 1), got ", p);
  auto keep = torch::empty_like(x, x.options().requires_grad(false)).bernoulli_(1.0 - p, gen);
  return x * keep * (1.0 / (1.0 - p));
}

}  // namespace tessera::parallel
