#include "tessera/models/rope.h"

#include <cmath>

#include "tessera/core/check.h"

namespace tessera::models {

void RopeScaling::validate(const std::string& owner) const {
  if (type == Type::kNone) return;
  TS_CHECK_T(ConfigError, factor >= 1.0 && std::isfinite(factor), owner,
             ".rope_scaling.factor must be a number >= 1, got ", factor);
  if (type != Type::kLlama3) return;
  TS_CHECK_T(ConfigError, low_freq_factor > 0 && std::isfinite(low_freq_factor), owner,
             ".rope_scaling.low_freq_factor must be a positive number, got ", low_freq_factor);
  TS_CHECK_T(ConfigError, high_freq_factor > low_freq_factor && std::isfinite(high_freq_factor),
             owner, ".rope_scaling.high_freq_factor (", high_freq_factor,
             ") must be greater than low_freq_factor (", low_freq_factor, ")");
  TS_CHECK_T(ConfigError, original_max_position_embeddings > 0, owner,
             ".rope_scaling.original_max_position_embeddings must be > 0, got ",
             original_max_position_embeddings);
}

const char* RopeScaling::type_name(Type type) {
  switch (type) {
    case Type::kLinear:
      return "linear";
    case Type::kLlama3:
      return "llama3";
    case Type::kNone:
      break;
  }
  return "none";
}

bool RopeScaling::operator==(const RopeScaling& o) const {
  if (type != o.type) return false;
  if (type == Type::kNone) return true;
  if (type == Type::kLinear) return factor == o.factor;
  return factor == o.factor && low_freq_factor == o.low_freq_factor &&
         high_freq_factor == o.high_freq_factor &&
         original_max_position_embeddings == o.original_max_position_embeddings;
}

torch::Tensor rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling) {
  TS_CHECK_T(ConfigError, head_dim > 0 && head_dim % 2 == 0,
             "rotary embeddings need an even head_dim, got ", head_dim);
  TS_CHECK_T(ConfigError, theta > 0 && std::isfinite(theta),
             "rope_theta must be a positive number, got ", theta);
  // transformers: 1 / theta ** (arange(0, dim, 2).float() / dim), in float32.
  auto exponent =
      torch::arange(0, head_dim, 2, torch::kLong).to(torch::kFloat) / static_cast<double>(head_dim);
  auto inv_freq = 1.0 / torch::pow(theta, exponent);
  switch (scaling.type) {
    case RopeScaling::Type::kNone:
      return inv_freq;
    case RopeScaling::Type::kLinear:
      return inv_freq / scaling.factor;
    case RopeScaling::Type::kLlama3:
      break;
  }
  const double old_context = static_cast<double>(scaling.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / scaling.low_freq_factor;
  const double high_freq_wavelen = old_context / scaling.high_freq_factor;
  auto wavelen = 2 * M_PI / inv_freq;
  // Long wavelengths (low frequencies) are stretched by the factor, short ones
  // kept, and the band between interpolated smoothly.
  auto scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq);
  auto smooth = (old_context / wavelen - scaling.low_freq_factor) /
                (scaling.high_freq_factor - scaling.low_freq_factor);
  auto smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled;
  auto medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return torch::where(medium, smoothed, scaled);
}

std::pair<torch::Tensor, torch::Tensor> rope_cos_sin(const torch::Tensor& inv_freq, int64_t T,
                                                     const torch::Device& device) {
  auto pos = torch::arange(T, torch::TensorOptions().dtype(torch::kFloat).device(device));
  auto freqs = torch::outer(pos, inv_freq.to(device));  // [T, head_dim / 2]
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos,
                         const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto rotated = torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  return x * cos.to(x.scalar_type()) + rotated * sin.to(x.scalar_type());
}

}  // namespace tessera::models
