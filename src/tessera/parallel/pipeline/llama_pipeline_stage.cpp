#include "tessera/parallel/pipeline/llama_pipeline_stage.h"

#include <string>

namespace tessera::parallel {

std::vector<std::pair<int64_t, int64_t>> split_llama_layers_by_parameters(
    const models::LlamaConfig& c, int p, int v) {
  split_layers(c.num_hidden_layers, p, v);  // the same ConfigError for too many chunks
  const int64_t C = c.hidden_size, hd = c.effective_head_dim(), I = c.intermediate_size;
  const int64_t q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
  const int64_t attention = 2 * C * q + 2 * C * kv + (c.attention_bias ? q + 2 * kv + C : 0);
  const int64_t mlp = 3 * C * I + (c.mlp_bias ? 2 * I + C : 0);
  const std::vector<int64_t> cost(static_cast<size_t>(c.num_hidden_layers), attention + mlp + 2 * C);
  const int64_t embedding = c.vocab_size * C;
  const int64_t head = C + c.vocab_size * C;  // the final norm and the head (or the tied copy)
  return balanced_split(cost, embedding, head, p * v);
}

namespace {

std::vector<std::pair<int64_t, int64_t>> llama_chunks(const models::LlamaConfig& config, int p,
                                                      const DecoderStageOptions& options) {
  const int v = options.virtual_stages;
  return options.balance_by_parameters ? split_llama_layers_by_parameters(config, p, v)
                                       : split_layers(config.num_hidden_layers, p, v);
}

}  // namespace

LlamaPipelineStage::LlamaPipelineStage(const models::LlamaConfig& config, const ProcessMesh& mesh,
                                       DecoderStageOptions options)
    : DecoderPipelineStage(mesh, options, llama_chunks(config, mesh.topology().pp(), options),
                           config.hidden_size, at::kFloat) {
  model_ = TensorParallelLlama(config, tp_options(), part());
  set_decoder(model_.get());
}

DecoderSpec llama_decoder_spec(const models::LlamaConfig& config) {
  DecoderSpec spec;
  spec.family = "Llama";
  spec.context_parallel = true;
  spec.layers_key = "model.num_hidden_layers";
  spec.num_layers = config.num_hidden_layers;
  for (const auto& [name, shape] : models::llama_parameter_shapes(config)) {
    spec.dense_names.push_back(name);
  }
  spec.check_tensor_parallel = [config](int tp, bool sequence_parallel) {
    (void)sequence_parallel;  // any sequence length that divides by tp (checked per batch)
    check_llama_tensor_parallel_layout(config, tp);
  };
  spec.split_by_parameters = [config](int p, int v) {
    return split_llama_layers_by_parameters(config, p, v);
  };
  spec.build_stage = [config](const ProcessMesh& mesh, const DecoderStageOptions& options) {
    return std::unique_ptr<DecoderPipelineStage>(new LlamaPipelineStage(config, mesh, options));
  };
  return spec;
}

}  // namespace tessera::parallel
