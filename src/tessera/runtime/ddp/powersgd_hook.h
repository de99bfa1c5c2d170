// PowerSgdReduction: PyTorch's powerSGD_hook (Vogels et al., "PowerSGD:
// Practical Low-Rank Gradient Compression for Distributed Optimization", 2019)
// as a BucketReduction (comm_hook.h).
//
// For the first start_powersgd_iter reductions of a bucket it all-reduces the
// bucket as it is. Then, per reduction:
//   1. with error feedback, the bucket becomes gradient + the error this rank
//      kept from the last reduction;
//   2. each parameter whose gradient is a matrix worth compressing (viewed as
//      [shape[0], rest]; rows x cols > min_compression_rate x r (rows + cols))
//      gives P = M Q, with Q [cols, r] from the last reduction, orthogonalized (warm start), or
//      drawn from random_seed and orthogonalized; one all_reduce (SUM) carries
//      every P and, beside them, the parameters left uncompressed (launch());
//   3. P is orthogonalized, Q = M^T P, and a second all_reduce (SUM) carries the
//      Qs (finish(), blocking: it needs the summed P);
//   4. M is replaced by P Q^T / world, the uncompressed parameters by their
//      average, and the error by (what this rank put in) - (what came out), for
//      the compressed matrices only (PyTorch's hook keeps it for the parameters
//      it sends whole too, where it is the rank's distance to the average: it
//      grows step after step and only cancels in the sum).
// Sent per compressed matrix: r (rows + cols) numbers instead of rows x cols.
//
// State per bucket (error, Qs, reduction count); the Qs and the error are not
// checkpointed (PyTorch does not either): a resumed run rebuilds them. Every rank
// must hold the same layouts.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "tessera/runtime/ddp/comm_hook.h"

namespace tessera::runtime::ddp {

class PowerSgdReduction : public BucketReduction {
 public:
  PowerSgdReduction(PowerSgdOptions options, std::vector<BucketLayout> layouts);

  void launch(comm::ProcessGroup& group, size_t bucket, const at::Tensor& flat) override;
  void finish(comm::ProcessGroup& group, size_t bucket, at::Tensor& flat) override;
  void abandon() noexcept override;

  // Which parameters of bucket b are compressed (true) or sent whole.
  const std::vector<bool>& compressed(size_t bucket) const { return buckets_.at(bucket).compress; }

 private:
  struct BucketState {
    BucketLayout layout;
    std::vector<bool> compress;  // per parameter
    std::vector<std::pair<int64_t, int64_t>> dims;  // per parameter: rows, cols as a matrix
    int64_t reductions = 0;
    at::Tensor error;  // error feedback, the bucket's size
    std::vector<at::Tensor> qs;  // per compressed parameter: [cols, r]
    // In flight.
    comm::WorkHandle work;
    bool plain = false;   // this reduction is an all-reduce of the bucket
    at::Tensor input;     // the bucket as this rank put it in (error feedback)
    at::Tensor packed;    // uncompressed parameters, then every P
  };
  // Q of a compressed parameter for this reduction (warm or fresh).
  at::Tensor initial_q(BucketState& s, size_t bucket, size_t k);

  PowerSgdOptions options_;
  std::vector<BucketState> buckets_;
};

// Gram-Schmidt on the columns of m [n, r], in place (PyTorch's _orthogonalize).
void orthogonalize_columns(at::Tensor& m, double epsilon);

}  // namespace tessera::runtime::ddp
