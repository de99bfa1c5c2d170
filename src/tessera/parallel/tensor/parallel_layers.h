// Megatron-style tensor-parallel layers over a tensor-parallel group of size tp,
// built only from the conjugate functions of tp_ops.h.
//
//   ColumnParallelLinear  Y = X A,  A split by columns: rank r holds out/tp
//                         outputs. Its input enters with copy_to_tp (or, under
//                         sequence parallel, gather_from_sequence); its output
//                         stays split unless gather_output.
//   RowParallelLinear     Y = X A,  A split by rows: rank r holds in/tp inputs and
//                         computes a partial sum, finished by reduce_from_tp (or,
//                         under sequence parallel, reduce_scatter_to_sequence).
//                         The bias is whole on every rank and added after the sum.
//   VocabParallelEmbedding  rank r holds rows [r V/tp, (r+1) V/tp) of the table;
//                         ids outside give zeros, and the sum over ranks
//                         (reduce_from_tp / reduce_scatter_to_sequence) is the lookup.
//
// A column-parallel layer followed by a row-parallel one (attention's qkv and
// output projections, the MLP's two layers) needs one all-reduce forward and one
// backward. Each layer can be built from the dense layer's full weights
// (from_dense): rank r keeps its slice, so a tensor-parallel model starts from
// the same weights as the dense one.
//
// Dense weights follow torch::nn::Linear: weight [out, in], y = x W^T + b.
// Shapes that do not divide by tp are a ConfigError naming the layer and sizes.
// Not thread-safe; every rank of the group runs the same layers in the same order.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "tessera/comm/process_group.h"
#include "tessera/parallel/context/context_parallel.h"
#include "tessera/parallel/expert/expert_parallel.h"
#include "tessera/parallel/tensor/dropout_rng.h"

namespace tessera::parallel {

struct TensorParallelOptions {
  std::shared_ptr<comm::ProcessGroup> group;  // the tensor-parallel group
  bool sequence_parallel = false;  // activations outside the layers hold 1/tp of the sequence
  // Where dropout draws from (dropout_rng.h); needed by models with dropout > 0.
  std::shared_ptr<DropoutRng> dropout_rng;
  // Activation checkpointing keeps 1/tp of each replicated segment input
  // (tp_checkpoint.h); the models read it, the layers do not.
  bool partition_activations = false;
  // false: the layers skip drawing their N(0, 0.02) starting weights and leave
  // them uninitialized, for a caller that overwrites every one (a model built
  // only to load a checkpoint into).
  bool draw_weights = true;
  // Context parallelism (context_parallel.h): the models' attention runs across
  // this cp group and each rank holds its chunks of every sequence; the layers
  // themselves work on whatever tokens they get.
  ContextParallelOptions context = {};
  // Expert parallelism (expert_parallel.h): the models' MoE layers hold
  // 1/ep of the experts and send tokens over this ep group.
  ExpertParallelOptions expert = {};
};

// Which part of a dense weight a tensor-parallel rank holds: all of it, its
// equal share of the rows (the first dimension: a column-parallel weight, a
// vocabulary-parallel table), or of the columns (the second: a row-parallel
// weight).
//
// An expert tensor of a mixture-of-experts layer ([num_experts, ...], models/moe.h)
// is first cut along its expert dimension over the expert-parallel group (rank
// r of ep holds experts [r E/ep, (r+1) E/ep)); `kind` then applies to the
// dimensions after it (kRows: dimension 1, kColumns: dimension 2).
struct DenseSlice {
  enum class Kind { kWhole, kRows, kColumns } kind = Kind::kWhole;
  int64_t blocks = 1;  // kRows of [q; k; v]: each rank takes its part of each block
  bool experts = false;  // dimension 0 counts experts (see above)
  // The dimension `kind` cuts (none for kWhole).
  int64_t tp_dim() const {
    return (kind == Kind::kColumns ? 1 : 0) + (experts ? 1 : 0);
  }
};
// Tensor-parallel rank `rank` of `size`'s part of `dense` (a view where it can
// be one); for expert tensors, of expert-parallel rank `ep_rank` of `ep_size`'s
// experts.
torch::Tensor dense_slice(const torch::Tensor& dense, DenseSlice slice, int rank, int size,
                          int ep_rank = 0, int ep_size = 1);
// The dense tensor's shape from the shape of one rank's slice of it.
std::vector<int64_t> dense_shape(at::IntArrayRef local, DenseSlice slice, int size, int ep_size = 1);

class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  // in -> out, out divisible by tp. Weights ~ N(0, 0.02) from torch's default
  // generator on each rank's slice (use from_dense for dense-equal weights).
  ColumnParallelLinearImpl(int64_t in, int64_t out, TensorParallelOptions tp, bool bias = true,
                           bool gather_output = false);
  // Copies rank r's rows of the dense weight [out, in] (and bias [out]).
  // `row_blocks` > 1 splits the output into that many equal blocks and gives
  // each rank its part of every block (attention's [q; k; v] weight: 3).
  void from_dense(const torch::Tensor& weight, const torch::Tensor& bias, int64_t row_blocks = 1);
  // x: [B, T(/tp under sequence parallel), in] -> [B, T, out/tp] (or out, gathered).
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;  // [out/tp, in]
  torch::Tensor bias;    // [out/tp] or undefined

 private:
  TensorParallelOptions tp_;
  int64_t in_, out_;
  bool gather_output_;
};
TORCH_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public torch::nn::Module {
 public:
  // in -> out, in divisible by tp.
  RowParallelLinearImpl(int64_t in, int64_t out, TensorParallelOptions tp, bool bias = true,
                        bool input_is_parallel = true);
  // Copies rank r's columns of the dense weight [out, in] and the whole bias.
  void from_dense(const torch::Tensor& weight, const torch::Tensor& bias);
  // x: [B, T, in/tp] (or in, scattered here) -> [B, T(/tp under sequence parallel), out].
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;  // [out, in/tp]
  torch::Tensor bias;    // [out], whole; under sequence parallel it enters through
                         // copy_to_tp, so its gradient is summed over the group
 private:
  TensorParallelOptions tp_;
  int64_t in_, out_;
  bool input_is_parallel_;
};
TORCH_MODULE(RowParallelLinear);

class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  // vocab divisible by tp.
  VocabParallelEmbeddingImpl(int64_t vocab, int64_t dim, TensorParallelOptions tp);
  void from_dense(const torch::Tensor& weight);  // [vocab, dim]
  // ids: int64 [B, T] -> [B, T(/tp under sequence parallel), dim].
  torch::Tensor forward(const torch::Tensor& ids);
  // Rank r's vocabulary range [vocab_begin, vocab_end).
  int64_t vocab_begin() const { return begin_; }
  int64_t vocab_end() const { return end_; }

  torch::Tensor weight;  // [vocab/tp, dim]

 private:
  TensorParallelOptions tp_;
  int64_t vocab_, begin_, end_;
};
TORCH_MODULE(VocabParallelEmbedding);

// Mean cross entropy of logits split by vocabulary over the group
// (local_logits [N, V/tp], rank r's columns [r V/tp, (r+1) V/tp)) against
// targets int64 [N] in [0, V). Never builds the full [N, V] logits: the max, the
// sum of exponentials and the target's logit are all-reduced (three [N]
// vectors). The gradient is softmax - one_hot on each rank's columns.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& local_logits,
                                           const torch::Tensor& targets, comm::ProcessGroup& group);

}  // namespace tessera::parallel
