#include "tessera/runtime/ddp/distributed_data_parallel.h"

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <sstream>

#include "tessera/core/check.h"

namespace tessera::runtime::ddp {
namespace {

// One line per parameter and buffer: what must match across replicas.
std::vector<std::string> describe(const torch::nn::Module& m) {
  std::vector<std::string> lines;
  for (const auto& kv : m.named_parameters(true)) {
    std::ostringstream os;
    os << "parameter " << kv.key() << " " << kv.value().sizes() << " "
       << kv.value().scalar_type() << (kv.value().requires_grad() ? "" : " frozen");
    lines.push_back(os.str());
  }
  for (const auto& kv : m.named_buffers(true)) {
    std::ostringstream os;
    os << "buffer " << kv.key() << " " << kv.value().sizes() << " " << kv.value().scalar_type();
    lines.push_back(os.str());
  }
  return lines;
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

}  // namespace

DistributedDataParallel::NoSync::NoSync(Reducer& reducer) : reducer_(&reducer) {
  TS_CHECK(reducer.sync(), "no_sync() scopes may not nest");
  previous_ = reducer.sync();
  reducer.set_sync(false);
}

DistributedDataParallel::NoSync::NoSync(NoSync&& other) noexcept
    : reducer_(other.reducer_), previous_(other.previous_) {
  other.reducer_ = nullptr;
}

DistributedDataParallel::NoSync::~NoSync() {
  if (reducer_) reducer_->set_sync(previous_);
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<comm::ProcessGroup> group,
                                                 DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  TS_CHECK_T(ConfigError, module_ != nullptr, "DistributedDataParallel needs a module");
  TS_CHECK_T(ConfigError, group_ != nullptr, "DistributedDataParallel needs a process group");
  TS_CHECK_T(ConfigError, options_.bucket_cap_mb > 0 && options_.first_bucket_cap_mb > 0,
             "bucket_cap_mb must be positive (got ", options_.bucket_cap_mb, ")");
  verify_replicas_match();
  std::vector<at::Tensor> all;
  for (const auto& kv : module_->named_parameters(true)) {
    all.push_back(kv.value());
    if (!kv.value().requires_grad()) continue;
    names_.push_back(kv.key());
    params_.push_back(kv.value());
  }
  for (const auto& kv : module_->named_buffers(true)) {
    buffers_.push_back(kv.value());
    all.push_back(kv.value());
  }
  broadcast_from_rank0(all);
  ReducerOptions ro;
  ro.bucket_cap_bytes = static_cast<int64_t>(options_.bucket_cap_mb * (1 << 20));
  ro.first_bucket_cap_bytes = static_cast<int64_t>(options_.first_bucket_cap_mb * (1 << 20));
  ro.find_unused_parameters = options_.find_unused_parameters;
  ro.comm_hook = options_.comm_hook;
  reducer_ = std::make_unique<Reducer>(names_, params_, group_, ro);
}

void DistributedDataParallel::verify_replicas_match() {
  if (group_->size() == 1) return;
  const std::string mine = join(describe(*module_));
  // Cheap path: compare a 64-bit hash as four 16-bit limbs (exact in any dtype);
  // max(h) == -max(-h) on every limb iff all ranks agree.
  const uint64_t h = std::hash<std::string>{}(mine);
  auto t = at::empty({8}, at::kLong);
  for (int k = 0; k < 4; ++k) {
    const int64_t limb = static_cast<int64_t>((h >> (16 * k)) & 0xffff);
    t[k] = limb;
    t[k + 4] = -limb;
  }
  group_->all_reduce(t, comm::ReduceOp::kMax)->wait();
  bool same = true;
  for (int k = 0; k < 4; ++k) same &= t[k].item<int64_t>() == -t[k + 4].item<int64_t>();
  if (same) return;
  // Slow path, only on mismatch: gather every description to name the difference.
  const int n = group_->size();
  auto len = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
  std::vector<at::Tensor> lens(n);
  for (auto& l : lens) l = at::empty({1}, at::kLong);
  group_->all_gather(lens, len)->wait();
  int64_t max_len = 0;
  for (auto& l : lens) max_len = std::max(max_len, l.item<int64_t>());
  auto bytes = at::zeros({max_len}, at::kInt);
  for (size_t i = 0; i < mine.size(); ++i) bytes[i] = static_cast<int>(mine[i]);
  std::vector<at::Tensor> all(n);
  for (auto& a : all) a = at::empty({max_len}, at::kInt);
  group_->all_gather(all, bytes)->wait();
  std::vector<std::vector<std::string>> descs(n);
  for (int r = 0; r < n; ++r) {
    std::string s(lens[r].item<int64_t>(), ' ');
    auto acc = all[r].accessor<int, 1>();
    for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(acc[i]);
    descs[r] = split(s);
  }
  for (int r = 1; r < n; ++r) {
    const auto& a = descs[0];
    const auto& b = descs[r];
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      const std::string x = i < a.size() ? a[i] : "(nothing)";
      const std::string y = i < b.size() ? b[i] : "(nothing)";
      if (x == y) continue;
      TS_THROW(ConfigError, "DistributedDataParallel: the model differs between ranks: entry ",
               i, " is '", x, "' on rank 0 but '", y, "' on rank ", r,
               "; every rank must build the same model before wrapping it");
    }
  }
  TS_THROW(ConfigError, "DistributedDataParallel: model descriptions hash differently on some "
           "ranks; every rank must build the same model before wrapping it");
}

void DistributedDataParallel::broadcast_from_rank0(std::vector<at::Tensor> tensors) {
  if (group_->size() == 1 || tensors.empty()) return;
  at::NoGradGuard no_grad;
  // One broadcast per dtype: flatten, send, copy back.
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (auto& t : tensors) {
    if (t.numel() > 0) by_dtype[t.scalar_type()].push_back(t);
  }
  for (auto& kv : by_dtype) {
    std::vector<at::Tensor> flat_parts;
    for (auto& t : kv.second) flat_parts.push_back(t.detach().reshape({-1}));
    auto flat = at::cat(flat_parts);
    group_->broadcast(flat, 0)->wait();
    int64_t offset = 0;
    for (auto& t : kv.second) {
      t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

void DistributedDataParallel::prepare_for_backward(const at::Tensor& loss) {
  reducer_->prepare_for_backward({loss});
}

void DistributedDataParallel::sync_buffers() {
  if (!options_.broadcast_buffers) return;
  broadcast_from_rank0(buffers_);
}

}  // namespace tessera::runtime::ddp
