// TpDecoder: what a pipeline stage (pipeline/decoder_pipeline_stage.h) needs of
// a tensor-parallel decoder-only language model, whatever its family (the GPT of
// tp_gpt.h, the Llama of tp_llama.h): embed the first stage's tokens, run a
// range of blocks, finish the last stage with the head and the vocab-parallel
// loss. A rank builds only the DecoderPart it holds.
//
// Parameter names are the dense model's; each rank holds its slice of a tensor
// as slice_of(name) says (DenseSlice, parallel_layers.h), so checkpoints and
// Hugging Face files map one to one whatever the layout.
//
// Contract: every call is collective over the tensor-parallel group (all its
// ranks make the same calls in the same order); calling a part the rank does
// not hold is a tessera::Error. Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/parallel/tensor/parallel_layers.h"

namespace tessera::parallel {

// Which part of a decoder a rank holds; the default is all of it.
struct DecoderPart {
  std::vector<std::pair<int64_t, int64_t>> blocks;  // [begin, end) ranges; empty: every block
  bool embedding = true;  // the token (and position) embedding, and embed()
  bool head = true;       // the final norm, the head (or the tied embedding), and head_loss()
  // false: skip drawing the dense model's initial weights (the parameters hold
  // placeholders) because the caller loads every one of them next, e.g. from a
  // Hugging Face checkpoint; drawing a billion-parameter model on every rank
  // costs far more than reading the rank's slices.
  bool initialize = true;
};

class TpDecoder {
 public:
  virtual ~TpDecoder() = default;
  // idx [B, T] -> the input of block 0, [B, T(/tp under sequence parallel), hidden].
  virtual torch::Tensor embed(const torch::Tensor& idx) = 0;
  // Blocks [begin, end) on x [B, T(/tp), hidden].
  virtual torch::Tensor blocks(int64_t begin, int64_t end, torch::Tensor x) = 0;
  // The final norm and the head on the last block's output: this rank's logits
  // [B, T, vocab/tp], columns [r vocab/tp, (r+1) vocab/tp) of the dense logits.
  virtual torch::Tensor logits(const torch::Tensor& x) = 0;
  // The final norm, the head and the mean vocab-parallel cross entropy (the same
  // value on every tensor-parallel rank).
  virtual torch::Tensor head_loss(const torch::Tensor& x, const torch::Tensor& targets) = 0;
  // The token embedding this rank holds when the head is tied to it and the rank
  // holds the embedding or the head; undefined otherwise. A pipeline sums its
  // gradient over the first and last stage.
  virtual torch::Tensor tied_embedding() const = 0;
  // The dense name of the tied token embedding ("" when the head is untied).
  virtual std::string tied_embedding_name() const = 0;
  // How this rank's copy of dense parameter `name` is cut from the dense tensor.
  virtual DenseSlice slice_of(const std::string& name) const = 0;
  // The module holding the parameters (train/eval, named_parameters).
  virtual torch::nn::Module& module() = 0;

  // Mixture-of-experts decoders (the defaults are a dense model's):
  // the weight of the routers' auxiliary losses in the backward (1 / the
  // micro-batches of a step, as each micro-batch's loss is weighted);
  virtual void set_auxiliary_loss_scale(double) {}
  // the sum of their values over every forward since the last take;
  virtual double take_auxiliary_loss() { return 0.0; }
  // tokens kept per expert in training forwards, [layers, experts] int64
  // (zero rows for layers this rank does not hold), since the last take;
  // undefined for a dense model.
  virtual torch::Tensor take_tokens_per_expert() { return {}; }
};

// Fills every parameter of `module` (named as the dense model's) with rank
// `rank` of `size`'s slice (slice_of) of the dense tensor of the same name, as
// `for_each_dense` hands the dense tensors out one at a time (a model's
// models::for_each_initial_parameter). Internal error naming `model` if a
// slice does not fit its parameter or a parameter gets no tensor.
using DenseTensorVisitor = std::function<void(const std::string& name, const torch::Tensor& dense)>;
// Expert tensors take expert-parallel rank `ep_rank` of `ep_size`'s experts.
void fill_from_dense(torch::nn::Module& module,
                     const std::function<void(const DenseTensorVisitor&)>& for_each_dense,
                     const std::function<DenseSlice(const std::string&)>& slice_of, int rank,
                     int size, const char* model, int ep_rank = 0, int ep_size = 1);

}  // namespace tessera::parallel
