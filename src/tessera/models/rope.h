// Rotary position embeddings (RoPE, Su et al. 2021) as Llama uses them, in Hugging
// Face's "rotate_half" layout: a head's dimensions are split into two halves, and
// dimension i of the first half rotates with dimension i of the second, by the
// angle position * inv_freq[i]. (Meta's original checkpoints interleave the
// pairs instead; Hugging Face's conversion permutes q/k weights so that this
// layout computes the same function, and so does every HF Llama checkpoint.)
//
// The frequencies are inv_freq[i] = theta^(-2i / head_dim), optionally rescaled
// for a longer context: "linear" divides them all by a factor; "llama3" (Llama
// 3.1) divides the low frequencies by the factor, keeps the high ones and
// interpolates between, by wavelength against the original context length.
// Each formula follows transformers' modeling_rope_utils, in float32 like it,
// so the angles agree to the float ulp.
//
// Pure functions; thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace tessera::models {

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;  // linear and llama3
  // llama3 only: frequencies with wavelength above original / low_freq_factor
  // are divided by factor, those below original / high_freq_factor are kept.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;

  // ConfigError naming `owner`.rope_scaling.<field> when a value is out of range.
  void validate(const std::string& owner) const;
  // "none", "linear" or "llama3": the names config files use.
  static const char* type_name(Type type);
  bool operator==(const RopeScaling& other) const;
  bool operator!=(const RopeScaling& other) const { return !(*this == other); }
};

// float32 [head_dim / 2] inverse frequencies on the CPU. head_dim must be even
// and theta > 0 (ConfigError otherwise).
torch::Tensor rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling);

// cos and sin of the angles of positions 0..T-1, float32 [T, head_dim] each
// (the half-size table repeated twice, as rotate_half needs), on `device`.
std::pair<torch::Tensor, torch::Tensor> rope_cos_sin(const torch::Tensor& inv_freq, int64_t T,
                                                     const torch::Device& device);

// x * cos + rotate_half(x) * sin for x [B, H, T, head_dim] and cos, sin from
// rope_cos_sin (broadcast over B and H); cos and sin are cast to x's dtype.
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos,
                         const torch::Tensor& sin);

}  // namespace tessera::models
