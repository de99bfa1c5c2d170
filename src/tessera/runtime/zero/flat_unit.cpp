#include "tessera/runtime/zero/flat_unit.h"

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>

#include "tessera/core/check.h"

namespace tessera::runtime::zero {
namespace {

// A tensor sharing `base`'s storage at `offset` with `sizes`, not an autograd view
// of it: parameters and gradients bound this way can be assigned, detached and
// resized freely (the DDP reducer binds its buckets the same way).
at::Tensor alias(const at::Tensor& base, int64_t offset, at::IntArrayRef sizes) {
  at::Tensor t = at::empty({0}, base.options());
  t.set_(base.storage(), base.storage_offset() + offset, sizes);
  return t;
}

int64_t storage_bytes(const at::Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.storage().nbytes()) : 0;
}

}  // namespace

FlatUnit::FlatUnit(std::vector<std::string> names, std::vector<at::Tensor> params, int stage,
                   int rank, int world, int64_t alignment)
    : names_(std::move(names)),
      params_(std::move(params)),
      stage_(stage),
      rank_(rank),
      partition_(
          [&] {
            std::vector<int64_t> numels;
            for (const auto& p : params_) numels.push_back(p.numel());
            return numels;
          }(),
          world, alignment) {
  TS_INTERNAL_ASSERT(stage_ >= 1 && stage_ <= 3 && !params_.empty());
  TS_INTERNAL_ASSERT(names_.size() == params_.size());
  at::NoGradGuard no_grad;
  const auto options = params_[0].options().requires_grad(false);
  for (size_t i = 0; i < params_.size(); ++i) {
    TS_CHECK_T(ConfigError, params_[i].scalar_type() == params_[0].scalar_type() &&
                                params_[i].device() == params_[0].device(),
               "ZeRO: parameter '", names_[i], "' has another dtype or device than '", names_[0],
               "' in the same unit");
  }
  flat_params_ = at::zeros({partition_.padded_numel()}, options);
  for (size_t i = 0; i < params_.size(); ++i) {
    flat_params_.narrow(0, partition_.offset(i), params_[i].numel())
        .copy_(params_[i].detach().reshape({-1}));
  }
  const int64_t s = partition_.shard_numel();
  const int64_t begin = partition_.range_begin(rank_);
  if (stage_ == 3) {
    shard_ = flat_params_.narrow(0, begin, s).clone();
  } else {
    shard_ = alias(flat_params_, begin, {s});
  }
  shard_.requires_grad_(true);
  if (stage_ == 1) {
    flat_grads_ = at::zeros({partition_.padded_numel()}, options);
    grad_shard_ = alias(flat_grads_, begin, {s});
  } else {
    grad_shard_ = at::empty({s}, options);
    grad_zero_pending_ = true;
  }
  shard_.mutable_grad() = grad_shard_;
  bind_params_to_flat();
  if (stage_ == 1) bind_gradients();
  if (stage_ == 3) release();
}

void FlatUnit::bind_params_to_flat() {
  for (size_t i = 0; i < params_.size(); ++i) {
    // set_data keeps the Variable (its identity, grad accumulator, hooks) and
    // swaps what it points at, like Python's `param.data = view`.
    params_[i].set_data(alias(flat_params_, partition_.offset(i), params_[i].sizes()));
  }
}

void FlatUnit::bind_gradients() {
  if (stage_ != 1) return;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& grad = params_[i].mutable_grad();
    const int64_t off = partition_.offset(i);
    if (grad.defined() && grad.data_ptr() == flat_grads_.narrow(0, off, 1).data_ptr()) continue;
    at::Tensor view = alias(flat_grads_, off, params_[i].sizes());
    if (grad.defined()) {
      view.copy_(grad);
    } else {
      view.zero_();
    }
    grad = view;
  }
}

void FlatUnit::launch_reduce(comm::ProcessGroup& group, bool use_reduce_scatter) {
  TS_INTERNAL_ASSERT(!reduce_work_, "a reduction of this unit is already in flight");
  at::NoGradGuard no_grad;
  const int64_t s = partition_.shard_numel();
  if (stage_ == 1) {
    reduce_input_ = flat_grads_;
  } else {
    // Flatten the unit's gradients and let autograd's own buffers go. The padding
    // stays zero in a kept buffer: reductions of zeros are zeros.
    reduce_input_ = kept_input_.defined()
                        ? kept_input_
                        : at::zeros({partition_.padded_numel()}, flat_params_.options());
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor& grad = params_[i].mutable_grad();
      TS_CHECK_T(ConfigError, grad.defined(), "ZeRO: parameter '", names_[i],
                 "' got no gradient in this backward pass; every parameter of a unit must "
                 "take part in the loss");
      reduce_input_.narrow(0, partition_.offset(i), params_[i].numel()).copy_(grad.reshape({-1}));
      grad = at::Tensor();
    }
  }
  reduce_all_ = !use_reduce_scatter;
  if (reduce_all_) {
    // All-reduce in place of a copy (stage 1's flat gradients keep their local sums).
    if (stage_ == 1) reduce_input_ = flat_grads_.clone();
    reduce_work_ = group.all_reduce(reduce_input_, comm::ReduceOp::kAvg);
  } else {
    if (kept_output_.defined()) {
      reduce_output_ = kept_output_;
    } else if (spare_shard_.defined()) {
      reduce_output_ = std::move(spare_shard_);  // a step was skipped: no gather took it
      spare_shard_ = at::Tensor();
    } else {
      reduce_output_ = at::empty({s}, flat_params_.options());
    }
    reduce_work_ = group.reduce_scatter(reduce_output_, reduce_input_, comm::ReduceOp::kAvg);
  }
}

void FlatUnit::finish_reduce() {
  if (!reduce_work_) return;
  comm::WorkHandle work = std::move(reduce_work_);
  reduce_work_ = nullptr;
  work->wait();
  at::NoGradGuard no_grad;
  const int64_t s = partition_.shard_numel();
  const at::Tensor mine =
      reduce_all_ ? reduce_input_.narrow(0, partition_.range_begin(rank_), s) : reduce_output_;
  if (stage_ == 1 || grad_zero_pending_) {
    grad_shard_.copy_(mine);  // the unit's averaged gradient, in its own range
    grad_zero_pending_ = false;
  } else {
    grad_shard_.add_(mine);  // accumulation across micro-steps
  }
  if (keep_reduce_buffers_ && stage_ == 2) {
    kept_input_ = reduce_input_;
    kept_output_ = reduce_output_;
  } else {
    kept_input_ = at::Tensor();
    kept_output_ = at::Tensor();
    // The output has served; the all-gather after the optimizer step needs a
    // shard-sized input of its own, and this one is already faulted in.
    if (stage_ != 3) spare_shard_ = reduce_output_;
  }
  reduce_input_ = at::Tensor();
  reduce_output_ = at::Tensor();
}

void FlatUnit::zero_grad() {
  at::NoGradGuard no_grad;
  if (stage_ == 1) {
    flat_grads_.zero_();
    bind_gradients();
  } else {
    grad_zero_pending_ = true;  // the next reduction overwrites instead of adding
    for (auto& p : params_) p.mutable_grad() = at::Tensor();
  }
  shard_.mutable_grad() = grad_shard_;
}

const at::Tensor& FlatUnit::grad_shard() const {
  if (grad_zero_pending_) {
    at::NoGradGuard no_grad;
    const_cast<at::Tensor&>(grad_shard_).zero_();
    grad_zero_pending_ = false;
  }
  return grad_shard_;
}

void FlatUnit::launch_gather(comm::ProcessGroup& group) {
  TS_INTERNAL_ASSERT(!gather_work_, "a gather of this unit is already in flight");
  if (stage_ == 3) {
    TS_INTERNAL_ASSERT(!gathered_);
    at::native::resize_bytes_cpu(flat_params_.storage().unsafeGetStorageImpl(),
                                 partition_.padded_numel() * flat_params_.element_size());
    gathered_ = true;
    gather_input_ = store_ ? store_->acquire(store_index_) : shard_.detach();
  } else {
    // A copy: the shard is a view into the output, and MPI forbids aliasing.
    if (spare_shard_.defined()) {
      gather_input_ = std::move(spare_shard_);
      spare_shard_ = at::Tensor();
      gather_input_.copy_(shard_.detach());
    } else {
      gather_input_ = shard_.detach().clone();
    }
  }
  // Written through a tensor with its own version counter: the parameters' saved
  // versions in autograd's graph do not change (as with an optimizer's .data()).
  gather_work_ = group.all_gather_into(flat_params_.variable_data(), gather_input_);
}

void FlatUnit::finish_gather() {
  if (!gather_work_) return;
  comm::WorkHandle work = std::move(gather_work_);
  gather_work_ = nullptr;
  work->wait();
  gather_input_ = at::Tensor();
  if (store_) store_->release(store_index_);
}

void FlatUnit::release() {
  TS_INTERNAL_ASSERT(stage_ == 3 && !gather_work_);
  at::native::resize_bytes_cpu(flat_params_.storage().unsafeGetStorageImpl(), 0);
  gathered_ = false;
}

void FlatUnit::bind_shard_store(ShardStore* store, size_t index) {
  TS_INTERNAL_ASSERT(stage_ == 3 && !gather_work_ && store != nullptr);
  store_ = store;
  store_index_ = index;
  at::native::resize_bytes_cpu(shard_.storage().unsafeGetStorageImpl(), 0);
}

int64_t FlatUnit::param_bytes() const {
  return storage_bytes(flat_params_) + (stage_ == 3 ? storage_bytes(shard_) : 0);
}

int64_t FlatUnit::grad_bytes() const {
  if (stage_ == 1) return storage_bytes(flat_grads_);
  int64_t n = storage_bytes(grad_shard_);
  for (const auto& p : params_) n += storage_bytes(p.grad());
  return n;
}

int64_t FlatUnit::buffer_bytes() const {
  int64_t n = storage_bytes(reduce_output_) + storage_bytes(gather_input_) +
              storage_bytes(spare_shard_);
  if (!reduce_work_) n += storage_bytes(kept_input_) + storage_bytes(kept_output_);
  if (stage_ != 1 || reduce_all_) n += storage_bytes(reduce_input_);
  return n;
}

}  // namespace tessera::runtime::zero
