#include "tessera/parallel/pipeline/gpt_pipeline_stage.h"

#include "tessera/core/check.h"

namespace tessera::parallel {

std::vector<std::pair<int64_t, int64_t>> split_layers_by_parameters(const models::GPTConfig& c,
                                                                    int p, int v) {
  split_layers(c.n_layer, p, v);  // the same ConfigError for too many chunks
  const int64_t C = c.n_embd, b = c.bias ? 1 : 0;
  const int64_t block = 2 * 2 * C                   // ln_1, ln_2
                        + 3 * C * C + b * 3 * C     // c_attn
                        + C * C + b * C             // attn.c_proj
                        + 4 * C * C + b * 4 * C     // c_fc
                        + 4 * C * C + b * C;        // mlp.c_proj
  const std::vector<int64_t> cost(static_cast<size_t>(c.n_layer), block);
  const int64_t embedding = c.vocab_size * C + c.block_size * C;
  const int64_t head = 2 * C + c.vocab_size * C;  // ln_f and the tied copy of wte
  return balanced_split(cost, embedding, head, p * v);
}

namespace {

std::vector<std::pair<int64_t, int64_t>> gpt_chunks(const models::GPTConfig& config, int p,
                                                    const GptStageOptions& options) {
  const int v = options.virtual_stages;
  return options.balance_by_parameters ? split_layers_by_parameters(config, p, v)
                                       : split_layers(config.n_layer, p, v);
}

// The dense GPT's parameter names, from a GPT of the same depth and bias
// setting but minimal width (names do not depend on sizes).
std::vector<std::string> gpt_dense_names(const models::GPTConfig& model) {
  models::GPTConfig tiny = model;
  tiny.vocab_size = 1;
  tiny.block_size = 1;
  tiny.n_head = 1;
  tiny.n_embd = 1;
  std::vector<std::string> out;
  for (const auto& p : models::GPT(tiny)->named_parameters(true)) out.push_back(p.key());
  return out;
}

}  // namespace

GptPipelineStage::GptPipelineStage(const models::GPTConfig& config, const ProcessMesh& mesh,
                                   GptStageOptions options)
    : DecoderPipelineStage(mesh, options, gpt_chunks(config, mesh.topology().pp(), options),
                           config.n_embd, config.compute_dtype) {
  model_ = TensorParallelGPT(config, tp_options(), part());
  set_decoder(model_.get());
}

DecoderSpec gpt_decoder_spec(const models::GPTConfig& config) {
  DecoderSpec spec;
  spec.family = "GPT";
  spec.context_parallel = true;
  spec.num_experts = config.moe.num_experts;
  spec.layers_key = "model.n_layer";
  spec.num_layers = config.n_layer;
  spec.dense_names = gpt_dense_names(config);
  spec.check_tensor_parallel = [config](int tp, bool sp) {
    check_tensor_parallel_layout(config, tp, sp);
  };
  spec.split_by_parameters = [config](int p, int v) { return split_layers_by_parameters(config, p, v); };
  spec.build_stage = [config](const ProcessMesh& mesh, const DecoderStageOptions& options) {
    return std::unique_ptr<DecoderPipelineStage>(new GptPipelineStage(config, mesh, options));
  };
  return spec;
}

}  // namespace tessera::parallel
