#include "tessera/cli/plan/model_spec.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/check.h"

namespace tessera::cli::plan {

namespace {

struct Preset {
  const char* name;
  int64_t layers, hidden, heads;
};

// GPT-3 paper (Brown et al. 2020, table 2.1) shapes; "gpt-7b" is the 6.7 B model.
const Preset kPresets[] = {
    {"gpt-125m", 12, 768, 12},   {"gpt-350m", 24, 1024, 16},  {"gpt-760m", 24, 1536, 16},
    {"gpt-1.3b", 24, 2048, 16},  {"gpt-2.7b", 32, 2560, 32},  {"gpt-7b", 32, 4096, 32},
    {"gpt-13b", 40, 5120, 40},   {"gpt-30b", 48, 7168, 56},   {"gpt-175b", 96, 12288, 96},
};

}  // namespace

int64_t ModelSpec::block_expert_params() const {
  if (!moe()) return 0;
  const int64_t h = hidden, f = expert_width();
  return experts * (2 * h * f + (bias ? f + h : 0));
}

int64_t ModelSpec::block_params() const {
  const int64_t h = hidden;
  if (moe()) {
    // Attention (4h², 4h biases), LayerNorms (4h), the router (hE), the experts.
    return 4 * h * h + (bias ? 8 * h : 4 * h) + h * experts + block_expert_params();
  }
  // LayerNorms always have a weight and a bias (4h); Linear biases are 9h.
  const int64_t dense = 12 * h * h + (bias ? 13 * h : 4 * h);
  if (total_params_override <= 0 || layers <= 0) return dense;
  return std::max<int64_t>(1, (total_params_override - outside_params()) / layers);
}

int64_t ModelSpec::block_small_params(int64_t threshold) const {
  const int64_t h = hidden;
  if (moe()) {
    // ln_1, ln_2, c_attn, c_proj, the router, the stacked experts' weights
    // and biases ([E, h, F], [E, F, h], [E, F], [E, h]).
    const int64_t f = expert_width();
    const int64_t tensors[] = {3 * h * h, h * h, h * experts, experts * h * f, experts * f * h};
    const int64_t vectors[] = {h, h, h, h, 3 * h, h, experts * f, experts * h};
    int64_t small = 0;
    for (int64_t w : tensors) small += w < threshold ? w : 0;
    for (int i = 0; i < (bias ? 8 : 4); ++i) small += vectors[i] < threshold ? vectors[i] : 0;
    return small;
  }
  // Tensors of a block: ln_1, ln_2 (weight h and bias h each), c_attn (3h² +
  // 3h), c_proj (h² + h), c_fc (4h² + 4h), mlp c_proj (4h² + h).
  const int64_t weights[] = {3 * h * h, h * h, 4 * h * h, 4 * h * h};
  const int64_t vectors[] = {h, h, h, h, 3 * h, h, 4 * h, h};  // LayerNorms, then Linear biases
  int64_t small = 0;
  for (int64_t w : weights) small += w < threshold ? w : 0;
  const int n_vectors = bias ? 8 : 4;
  for (int i = 0; i < n_vectors; ++i) small += vectors[i] < threshold ? vectors[i] : 0;
  return small;
}

int64_t ModelSpec::outside_params() const {
  return vocab * hidden + seq * hidden + 2 * hidden;
}

int64_t ModelSpec::total_params() const {
  if (total_params_override > 0) return total_params_override;
  return layers * block_params() + outside_params();
}

double ModelSpec::step_flops(double sequences, bool recompute) const {
  const double s = static_cast<double>(seq), l = static_cast<double>(layers);
  const double h = static_cast<double>(hidden), V = static_cast<double>(vocab);
  // Forward FLOPs per token and block: attention's GEMMs 8h², its scores and
  // weighted sum 4sh, the MLP 16h² (MoE: topk experts of width F and the router).
  const double mlp = moe() ? static_cast<double>(topk) * 4.0 * h * static_cast<double>(expert_width()) +
                                 2.0 * h * static_cast<double>(experts)
                           : 16.0 * h * h;
  const double blocks = (recompute ? 4.0 : 3.0) * s * l * (8.0 * h * h + 4.0 * s * h + mlp);
  const double head = 6.0 * s * h * V;  // logits: forward 2shV, backward 4shV
  return sequences * (blocks + head);
}

void ModelSpec::validate() const {
  TS_CHECK_T(ConfigError, layers > 0, "the model needs --layers > 0 (got ", layers, ")");
  TS_CHECK_T(ConfigError, hidden > 0, "the model needs --hidden > 0 (got ", hidden, ")");
  TS_CHECK_T(ConfigError, heads > 0 && hidden % heads == 0, "--heads ", heads,
             " must be positive and divide --hidden ", hidden);
  TS_CHECK_T(ConfigError, seq > 0, "the model needs --seq > 0 (got ", seq, ")");
  TS_CHECK_T(ConfigError, vocab > 0, "the model needs --vocab > 0 (got ", vocab, ")");
  TS_CHECK_T(ConfigError, experts >= 0 && expert_hidden >= 0, "--experts and --expert-hidden must "
             "be >= 0 (got ", experts, " and ", expert_hidden, ")");
  TS_CHECK_T(ConfigError, !moe() || (topk >= 1 && topk <= experts), "--topk ", topk,
             " must be in [1, --experts ", experts, "]");
  TS_CHECK_T(ConfigError, !moe() || total_params_override == 0, "--params with --experts: give "
             "the shape (--layers, --hidden, --expert-hidden) instead; the experts' share of the "
             "parameters follows from it");
  TS_CHECK_T(ConfigError, total_params_override == 0 || total_params_override > outside_params(),
             "--params ", total_params_override, " is smaller than the embeddings alone (",
             outside_params(), " = vocab x hidden + seq x hidden): check --params and --hidden");
}

ModelSpec gpt_preset(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    ModelSpec m;
    m.name = p.name;
    m.layers = p.layers;
    m.hidden = p.hidden;
    m.heads = p.heads;
    m.seq = 2048;
    m.vocab = 50304;  // GPT-2's 50257 padded to a multiple of 128, as tensor parallelism needs
    return m;
  }
  std::string known;
  for (const Preset& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
  TS_THROW(ConfigError, "unknown model '", name, "'; known: ", known,
           " (or give --params/--layers/--hidden/--heads/--seq)");
}

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

}  // namespace tessera::cli::plan
