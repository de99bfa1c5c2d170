#include "tessera/checkpoint/group_coordinator.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "tessera/core/check.h"

namespace tessera::checkpoint {

namespace {

class GroupCoordinator : public Coordinator {
 public:
  explicit GroupCoordinator(std::shared_ptr<comm::ProcessGroup> group) : group_(std::move(group)) {
    TS_CHECK(group_ != nullptr, "make_group_coordinator needs a process group");
  }
  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }

  std::vector<std::string> all_gather(const std::string& value) override {
    const int n = size();
    // Lengths first, so every rank can size the padded byte exchange.
    at::Tensor len = at::full({1}, static_cast<int64_t>(value.size()), at::kLong);
    std::vector<at::Tensor> lens;
    for (int r = 0; r < n; ++r) lens.push_back(at::empty({1}, at::kLong));
    group_->all_gather(lens, len)->wait();
    int64_t max_len = 1;
    for (const auto& l : lens) max_len = std::max(max_len, l.item<int64_t>());
    at::Tensor mine = at::zeros({max_len}, at::kByte);
    if (!value.empty()) std::memcpy(mine.data_ptr(), value.data(), value.size());
    std::vector<at::Tensor> all;
    for (int r = 0; r < n; ++r) all.push_back(at::empty({max_len}, at::kByte));
    group_->all_gather(all, mine)->wait();
    std::vector<std::string> out;
    for (int r = 0; r < n; ++r) {
      const auto* p = static_cast<const char*>(all[static_cast<size_t>(r)].data_ptr());
      out.emplace_back(p, static_cast<size_t>(lens[static_cast<size_t>(r)].item<int64_t>()));
    }
    return out;
  }

  void barrier() override { group_->barrier()->wait(); }

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
};

}  // namespace

std::shared_ptr<Coordinator> make_group_coordinator(std::shared_ptr<comm::ProcessGroup> group) {
  return std::make_shared<GroupCoordinator>(std::move(group));
}

}  // namespace tessera::checkpoint
