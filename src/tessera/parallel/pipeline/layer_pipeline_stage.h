// LayerPipelineStage: any model given as a list of layers, each a module from
// tensor to tensor, cut into p * v chunks for pipeline parallelism; this rank
// builds and runs only the layers of its stage's chunks. The first chunk reads
// the micro-batch's input, the last chunk's output goes to the loss with the
// micro-batch's target. GptPipelineStage is the GPT-specific counterpart (tied
// embedding, tensor-parallel blocks).
//
//   auto mesh = ProcessMesh::build(world, 1, p);
//   LayerPipelineStage stage(
//       /*num_layers=*/8, [](int64_t i) { return torch::nn::AnyModule(torch::nn::Linear(64, 64)); },
//       [](const torch::Tensor& y, const torch::Tensor& t) { return torch::mse_loss(y, t); },
//       /*activation_shape=*/{64}, mesh);
//   stage.set_batch(x, y, m);  exec.run(stage);
//
// make_layer(i) is called for this rank's layers only, in increasing i; seed
// it by i for weights that do not depend on the layout. Every activation
// between chunks has the shape [micro-batch rows, activation_shape...] and
// activation_dtype (float32 unless given). Layers are split as evenly as their count allows
// (split_layers); named_parameters() are "<layer index>.<name>".
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/parallel/pipeline/pipeline_executor.h"
#include "tessera/parallel/pipeline/batched_stage.h"
#include "tessera/parallel/process_mesh.h"

namespace tessera::parallel {

class LayerPipelineStage : public BatchedStage {
 public:
  using LayerFactory = std::function<torch::nn::AnyModule(int64_t index)>;
  using LossFn = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;

  // ConfigError when p * v exceeds num_layers.
  LayerPipelineStage(int64_t num_layers, const LayerFactory& make_layer, LossFn loss,
                     std::vector<int64_t> activation_shape, const ProcessMesh& mesh, int v = 1,
                     c10::ScalarType activation_dtype = torch::kFloat32);

  // "<layer index>.<parameter name>" of this rank's layers.
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const override;

  torch::Tensor forward(int chunk, int micro, const torch::Tensor& input) override;
  torch::Tensor activation_like(int chunk, int micro) override;

 private:
  int p_, v_, stage_;
  LossFn loss_;
  std::vector<int64_t> activation_shape_;
  c10::ScalarType activation_dtype_;
  std::vector<std::pair<int64_t, int64_t>> my_layers_;  // per local chunk
  std::vector<std::pair<int64_t, torch::nn::AnyModule>> layers_;  // this rank's, by index
};

}  // namespace tessera::parallel
