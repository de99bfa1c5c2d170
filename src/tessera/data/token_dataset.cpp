#include "tessera/data/token_dataset.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "tessera/core/check.h"

namespace tessera::data {

int64_t TokenDataset::num_windows(int64_t block_size) const {
  return std::max<int64_t>(0, num_tokens() - block_size);
}

int64_t TokenDataset::num_blocks(int64_t block_size) const {
  TS_CHECK(block_size > 0, "block_size must be > 0, got ", block_size);
  return std::max<int64_t>(0, (num_tokens() - 1) / block_size);
}

std::pair<at::Tensor, at::Tensor> TokenDataset::get(int64_t i, int64_t block_size) const {
  TS_CHECK(block_size > 0, "block_size must be > 0, got ", block_size);
  TS_CHECK(i >= 0 && i < num_windows(block_size), "window start ", i, " is outside [0, ",
           num_windows(block_size), ") for block_size ", block_size, " in ", source(), " (",
           num_tokens(), " tokens)");
  at::Tensor buf = at::empty({block_size + 1}, at::kLong);
  copy_tokens(i, block_size + 1, buf.data_ptr<int64_t>());
  return {buf.slice(0, 0, block_size), buf.slice(0, 1, block_size + 1)};
}

std::pair<at::Tensor, at::Tensor> TokenDataset::get_blocks(
    const std::vector<int64_t>& block_indices, int64_t block_size) const {
  const int64_t B = static_cast<int64_t>(block_indices.size());
  const int64_t nb = num_blocks(block_size);
  at::Tensor x = at::empty({B, block_size}, at::kLong);
  at::Tensor y = at::empty({B, block_size}, at::kLong);
  std::vector<int64_t> buf(static_cast<size_t>(block_size + 1));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t k = block_indices[static_cast<size_t>(b)];
    TS_CHECK(k >= 0 && k < nb, "block ", k, " is outside [0, ", nb, ") for block_size ", block_size,
             " in ", source());
    copy_tokens(k * block_size, block_size + 1, buf.data());
    std::copy(buf.begin(), buf.end() - 1, x[b].data_ptr<int64_t>());
    std::copy(buf.begin() + 1, buf.end(), y[b].data_ptr<int64_t>());
  }
  return {x, y};
}

}  // namespace tessera::data
