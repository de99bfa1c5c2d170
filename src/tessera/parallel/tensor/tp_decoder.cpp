#include "tessera/parallel/tensor/tp_decoder.h"

#include "tessera/core/check.h"

namespace tessera::parallel {

void fill_from_dense(torch::nn::Module& module,
                     const std::function<void(const DenseTensorVisitor&)>& for_each_dense,
                     const std::function<DenseSlice(const std::string&)>& slice_of, int rank,
                     int size, const char* model, int ep_rank, int ep_size) {
  auto mine = module.named_parameters(true);
  size_t filled = 0;
  torch::NoGradGuard no_grad;
  for_each_dense([&](const std::string& name, const torch::Tensor& dense) {
    torch::Tensor* p = mine.find(name);
    if (p == nullptr) return;  // another rank's part
    const torch::Tensor slice = dense_slice(dense, slice_of(name), rank, size, ep_rank, ep_size);
    TS_INTERNAL_ASSERT(slice.sizes() == p->sizes(), model, ": slice of ", name, " has shape ",
                       slice.sizes(), ", the parameter ", p->sizes());
    p->copy_(slice);
    ++filled;
  });
  TS_INTERNAL_ASSERT(filled == mine.size(), model, ": ", mine.size() - filled,
                     " parameters have no counterpart in the dense model");
}

}  // namespace tessera::parallel
