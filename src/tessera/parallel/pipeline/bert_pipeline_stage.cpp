#include "tessera/parallel/pipeline/bert_pipeline_stage.h"

#include <string>

namespace tessera::parallel {

namespace {

// The chunks balanced by parameter count: the layers, plus the embeddings on the
// first chunk and the masked-LM head (and the tied word embedding) on the last.
std::vector<std::pair<int64_t, int64_t>> bert_chunks_by_parameters(const models::BertConfig& c,
                                                                   int p, int v) {
  split_layers(c.num_hidden_layers, p, v);  // the same ConfigError for too many chunks
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const int64_t layer = 4 * (C * C + C) + 2 * C * I + I + C + 4 * C;
  const std::vector<int64_t> cost(static_cast<size_t>(c.num_hidden_layers), layer);
  const int64_t embedding = (c.vocab_size + c.max_position_embeddings + c.type_vocab_size) * C + 2 * C;
  const int64_t head = c.vocab_size * C + c.vocab_size + C * C + 3 * C;
  return balanced_split(cost, embedding, head, p * v);
}

std::vector<std::pair<int64_t, int64_t>> bert_chunks(const models::BertConfig& config, int p,
                                                     const DecoderStageOptions& options) {
  const int v = options.virtual_stages;
  return options.balance_by_parameters ? bert_chunks_by_parameters(config, p, v)
                                       : split_layers(config.num_hidden_layers, p, v);
}

}  // namespace

BertPipelineStage::BertPipelineStage(const models::BertConfig& config, const ProcessMesh& mesh,
                                     DecoderStageOptions options)
    : DecoderPipelineStage(mesh, options, bert_chunks(config, mesh.topology().pp(), options),
                           config.hidden_size, at::kFloat) {
  model_ = TensorParallelBert(config, tp_options(), part());
  set_decoder(model_.get());
}

DecoderSpec bert_decoder_spec(const models::BertConfig& config) {
  DecoderSpec spec;
  spec.family = "BERT";
  spec.layers_key = "model.num_hidden_layers";
  spec.num_layers = config.num_hidden_layers;
  for (const auto& [name, shape] : models::bert_parameter_shapes(config)) {
    spec.dense_names.push_back(name);
  }
  spec.check_tensor_parallel = [config](int tp, bool sequence_parallel) {
    check_bert_tensor_parallel_layout(config, tp, sequence_parallel);
  };
  spec.split_by_parameters = [config](int p, int v) { return bert_chunks_by_parameters(config, p, v); };
  spec.build_stage = [config](const ProcessMesh& mesh, const DecoderStageOptions& options) {
    return std::unique_ptr<DecoderPipelineStage>(new BertPipelineStage(config, mesh, options));
  };
  return spec;
}

}  // namespace tessera::parallel
