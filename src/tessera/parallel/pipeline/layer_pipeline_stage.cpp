#include "tessera/parallel/pipeline/layer_pipeline_stage.h"

#include "tessera/core/check.h"
#include "tessera/parallel/pipeline/gpt_pipeline_stage.h"

namespace tessera::parallel {

LayerPipelineStage::LayerPipelineStage(int64_t num_layers, const LayerFactory& make_layer,
                                       LossFn loss, std::vector<int64_t> activation_shape,
                                       const ProcessMesh& mesh, int v,
                                       c10::ScalarType activation_dtype)
    : p_(mesh.topology().pp()), v_(v), stage_(mesh.coord().pp), loss_(std::move(loss)),
      activation_shape_(std::move(activation_shape)), activation_dtype_(activation_dtype) {
  TS_CHECK_T(ConfigError, loss_ != nullptr, "LayerPipelineStage needs a loss function");
  const auto all = split_layers(num_layers, p_, v_);  // ConfigError before any layer
  for (int c = 0; c < v_; ++c) my_layers_.push_back(all[static_cast<size_t>(c * p_ + stage_)]);
  for (const auto& [b, e] : my_layers_) {
    for (int64_t i = b; i < e; ++i) {
      layers_.emplace_back(i, make_layer(i));
      TS_CHECK_T(ConfigError, !layers_.back().second.is_empty(), "LayerPipelineStage: layer ", i,
                 " is an empty module");
    }
  }
}

std::vector<std::pair<std::string, torch::Tensor>> LayerPipelineStage::named_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [i, layer] : layers_) {
    for (const auto& p : layer.ptr()->named_parameters(true)) {
      out.emplace_back(std::to_string(i) + "." + p.key(), p.value());
    }
  }
  return out;
}

torch::Tensor LayerPipelineStage::forward(int chunk, int micro, const torch::Tensor& input) {
  const int k = chunk * p_ + stage_;
  torch::Tensor x = k == 0 ? micro_input(micro) : input;
  const auto [b, e] = my_layers_.at(static_cast<size_t>(chunk));
  for (auto& [i, layer] : layers_) {
    if (i >= b && i < e) x = layer.forward(x);
  }
  if (k != p_ * v_ - 1) return x;
  return loss_(x, micro_target(micro));
}

torch::Tensor LayerPipelineStage::activation_like(int, int micro) {
  const auto& in = micro_input(micro);
  std::vector<int64_t> shape{in.size(0)};
  shape.insert(shape.end(), activation_shape_.begin(), activation_shape_.end());
  return torch::empty(shape, torch::TensorOptions().dtype(activation_dtype_));
}

}  // namespace tessera::parallel
