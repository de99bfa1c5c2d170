// DecoderPipelineStage: this rank's share of a decoder-only language model under
// pipeline (and tensor) parallelism, for any model family that implements
// TpDecoder (tensor/tp_decoder.h): the GPT (gpt_pipeline_stage.h) and the Llama
// (llama_pipeline_stage.h). The model is cut into p * v chunks of whole blocks;
// the rank holds the chunks of its stage (virtual stages c * p + s,
// pipeline_schedule.h), each split over its tensor-parallel group. The first
// virtual stage also embeds, the last also applies the final norm, the head and
// the vocab-parallel loss.
//
// A head tied to the token embedding keeps a copy of the embedding on the first
// and the last stage; reduce_gradients() sums its gradient over the embedding
// group so both copies take the same step, as Megatron does, then runs the
// caller's gradient reduction (data parallel) if one is set. Activations between
// stages are [micro, T, hidden], or [micro, T/tp, hidden] under sequence
// parallel.
//
// DecoderSpec describes a family to the model-parallel engine
// (runtime/model_parallel): its depth, its dense parameter names, its layout
// checks and how to build a stage, so the engine trains every family the same
// way.
//
// Not thread-safe: one training thread per stage; every call that runs the
// model is collective over the tensor-parallel group.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/parallel/pipeline/batched_stage.h"
#include "tessera/parallel/process_mesh.h"
#include "tessera/parallel/tensor/dropout_rng.h"
#include "tessera/parallel/tensor/tp_decoder.h"

namespace tessera::parallel {

// The blocks [begin, end) of each of p * v chunks (virtual stages), in order,
// as even in count as possible. ConfigError naming the sizes when p * v > n_layer.
std::vector<std::pair<int64_t, int64_t>> split_layers(int64_t n_layer, int p, int v);

// Contiguous chunks of `block_cost`, minimizing the largest chunk's cost plus
// `first_extra` on chunk 0 and `last_extra` on the last (DeepSpeed's
// partition_method "parameters" when the costs are parameter counts). Every
// chunk keeps at least one block.
std::vector<std::pair<int64_t, int64_t>> balanced_split(const std::vector<int64_t>& block_cost,
                                                        int64_t first_extra, int64_t last_extra,
                                                        int chunks);

struct DecoderStageOptions {
  int virtual_stages = 1;          // v: chunks per stage (interleaved schedules)
  bool sequence_parallel = false;  // see tensor/tp_gpt.h
  uint64_t dropout_seed = 0;       // DropoutRng seed (with the mesh coordinates)
  bool balance_by_parameters = false;  // the family's split by parameters, else split_layers
  // With activation checkpointing: keep 1/tp of each checkpointed input
  // (tensor/tp_checkpoint.h).
  bool partition_activations = false;
  // false: the stage's weights are not drawn (DecoderPart::initialize); the
  // caller loads them all.
  bool initialize_weights = true;
  // With a cp group in the mesh: how attention crosses it (context_parallel.h).
  CpCommType cp_comm_type = CpCommType::kP2P;
  // With an ep group in the mesh: how MoE layers send tokens to their experts.
  TokenDispatcherType token_dispatcher = TokenDispatcherType::kAllToAll;
};

class DecoderPipelineStage : public BatchedStage {
 public:
  // set_batch takes [m * micro, T] ids and targets. What the stage's optimizer
  // steps on: the model's parameters, named as in the dense model.
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const override;

  torch::Tensor forward(int chunk, int micro, const torch::Tensor& input) override;
  torch::Tensor activation_like(int chunk, int micro) override;
  // Sums the tied embedding's gradient over its two stages, then runs the
  // caller's reduction (e.g. the data-parallel average).
  void reduce_gradients() override;

  // True when this rank's copy of `name` is a duplicate that a global sum over
  // every rank (a norm, a parameter count) must skip: the tied embedding on the
  // last stage, and whole (not split) parameters on tensor-parallel ranks > 0.
  bool is_duplicate(const std::string& name) const;
  // How this rank's copy of dense parameter `name` is cut (DenseSlice).
  DenseSlice slice_of(const std::string& name) const { return decoder_->slice_of(name); }
  // MoE: the auxiliary losses' values and the tokens per expert since the
  // last take (TpDecoder).
  double take_auxiliary_loss() { return decoder_->take_auxiliary_loss(); }
  torch::Tensor take_tokens_per_expert() { return decoder_->take_tokens_per_expert(); }
  // Training mode (dropout) or evaluation.
  void set_training(bool training) { decoder_->module().train(training); }
  DropoutRng& dropout_rng() { return *dropout_rng_; }
  TpDecoder& decoder() { return *decoder_; }

 protected:
  // `chunks`: the model's p * v chunks (split_layers or a family's balanced
  // split); `hidden` and `activation_dtype` shape what passes between stages.
  DecoderPipelineStage(const ProcessMesh& mesh, const DecoderStageOptions& options,
                       const std::vector<std::pair<int64_t, int64_t>>& chunks, int64_t hidden,
                       at::ScalarType activation_dtype);
  // What the derived stage builds its tensor-parallel model with.
  TensorParallelOptions tp_options() const { return tp_options_; }
  DecoderPart part() const;
  // The derived stage's model, built in its constructor; it outlives the base's use.
  void set_decoder(TpDecoder* decoder) { decoder_ = decoder; }

 private:
  bool first_chunk(int chunk) const { return chunk * p_ + stage_ == 0; }
  bool last_chunk(int chunk) const { return chunk * p_ + stage_ == p_ * v_ - 1; }

  int p_, v_, stage_, tp_rank_, tp_size_;
  int64_t hidden_;
  at::ScalarType activation_dtype_;
  bool sequence_parallel_;
  std::shared_ptr<comm::ProcessGroup> embedding_;
  bool initialize_weights_ = true;
  std::shared_ptr<DropoutRng> dropout_rng_;
  TensorParallelOptions tp_options_;
  std::vector<std::pair<int64_t, int64_t>> my_layers_;  // per local chunk
  TpDecoder* decoder_ = nullptr;
};

// A decoder family as the model-parallel engine sees it.
struct DecoderSpec {
  std::string family;      // "GPT", "Llama": for messages
  std::string layers_key;  // the config key of the depth ("model.n_layer"), for messages
  int64_t num_layers = 0;
  // Every parameter name of the dense model (weight_decay_exclude is checked
  // against them).
  std::vector<std::string> dense_names;
  // ConfigError when the model does not split over tp ranks (with sequence parallel).
  std::function<void(int tp, bool sequence_parallel)> check_tensor_parallel;
  // The p * v chunks balanced by parameter count.
  std::function<std::vector<std::pair<int64_t, int64_t>>(int p, int v)> split_by_parameters;
  // false: stages skip drawing the initial weights (DecoderStageOptions).
  bool initialize_weights = true;
  // The family's attention runs across a context-parallel group (causal
  // decoders: the GPT, the Llama).
  bool context_parallel = false;
  // Experts per MoE layer (0: a dense model); expert parallelism splits them.
  int64_t num_experts = 0;
  // This rank's stage of `mesh`.
  std::function<std::unique_ptr<DecoderPipelineStage>(const ProcessMesh&, const DecoderStageOptions&)>
      build_stage;
};

}  // namespace tessera::parallel
