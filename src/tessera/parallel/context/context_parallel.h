// Context parallelism: the sequence of every sample split across the ranks of a
// cp group, attention computed across them, everything else (embeddings,
// projections, MLPs, norms, the loss) on the rank's own tokens alone.
//
// Layout (head-tail pairing): a sequence of T tokens is cut into 2·cp equal
// chunks and rank r holds chunks r and 2·cp-1-r, in that order. Under causal
// attention the early chunk is cheap and the late one dear, so every rank does
// the same work. context_parallel_positions() gives a rank's global positions
// (for position embeddings and RoPE); context_parallel_shard() cuts a rank's
// tokens out of a whole batch (inputs, targets, masks alike).
//
//   ContextParallelOptions cp{mesh.cp(), CpCommType::kP2P};
//   auto x = context_parallel_shard(tokens, /*dim=*/1, cp.group->rank(), cp.group->size());
//   ...
//   auto y = context_parallel_attention(q, k, v, /*causal=*/true, cp);   // [B, H, T/cp, D]
//
// Communication (cp_comm_type, Megatron's names):
//   p2p        ring attention: key/value blocks travel around the ring while the
//              block in hand computes; partial results merge by log-sum-exp; in
//              backward, key/value and their gradients travel together and the
//              gradients arrive home after a full turn. O(T/cp) memory.
//   a2a        DeepSpeed-Ulysses: all-to-all from sequence-sharded to
//              head-sharded, whole-sequence attention over H/cp heads, and
//              back. Needs heads divisible by cp.
//   allgather  every rank gathers all keys and values (gathered again in
//              backward, key/value gradients reduce-scattered home).
//
// Every rank of the cp group calls context_parallel_attention for the same
// layers in the same order (it communicates). The cp ranks hold the same
// parameters: their gradients are averaged with the data-parallel ones.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "tessera/comm/process_group.h"
#include "tessera/parallel/context/cp_comm_type.h"

namespace tessera::parallel {

struct ContextParallelOptions {
  std::shared_ptr<comm::ProcessGroup> group;  // the cp group; null: no context parallelism
  CpCommType comm_type = CpCommType::kP2P;

  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  bool enabled() const { return size() > 1; }
};

// ConfigError unless seq_len divides into 2·cp chunks.
void check_context_parallel_length(int64_t seq_len, int cp);

// The global positions, in local order, of rank `rank`'s tokens of a sequence of
// seq_len tokens (int64 [seq_len / cp]).
torch::Tensor context_parallel_positions(int64_t seq_len, int rank, int cp);

// This rank's tokens of x along `dim` (a copy, contiguous).
torch::Tensor context_parallel_shard(const torch::Tensor& x, int64_t dim, int rank, int cp);

// The inverse: the whole sequence from every rank's shard (shards[r] from rank r).
torch::Tensor context_parallel_unshard(const std::vector<torch::Tensor>& shards, int64_t dim);

// Multi-head attention over the whole sequence for this rank's queries.
// q, k, v: [B, H, T/cp, D], this rank's tokens in the layout above (k and v with
// as many heads as q: repeat grouped kv heads first). Returns [B, H, T/cp, D] in
// q's dtype; differentiable in q, k and v. Scale 1/sqrt(D). Without a group (or
// cp = 1) it is plain attention with the same arithmetic.
torch::Tensor context_parallel_attention(const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v, bool causal,
                                         const ContextParallelOptions& cp);

}  // namespace tessera::parallel
