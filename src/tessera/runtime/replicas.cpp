#include "tessera/runtime/replicas.h"

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <sstream>

#include "tessera/core/check.h"

namespace tessera::runtime {
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

void verify_replicas_match(const torch::nn::Module& module, comm::ProcessGroup& group,
                           const std::string& who) {
  if (group.size() == 1) return;
  const std::string mine = join(describe(module));
  // Cheap path: compare a 64-bit hash as four 16-bit limbs (exact in any dtype);
  // max(h) == -max(-h) on every limb iff all ranks agree.
  const uint64_t h = std::hash<std::string>{}(mine);
  auto t = at::empty({8}, at::kLong);
  for (int k = 0; k < 4; ++k) {
    const int64_t limb = static_cast<int64_t>((h >> (16 * k)) & 0xffff);
    t[k] = limb;
    t[k + 4] = -limb;
  }
  group.all_reduce(t, comm::ReduceOp::kMax)->wait();
  bool same = true;
  for (int k = 0; k < 4; ++k) same &= t[k].item<int64_t>() == -t[k + 4].item<int64_t>();
  if (same) return;
  // Slow path, only on mismatch: gather every description to name the difference.
  const int n = group.size();
  auto len = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
  std::vector<at::Tensor> lens(n);
  for (auto& l : lens) l = at::empty({1}, at::kLong);
  group.all_gather(lens, len)->wait();
  int64_t max_len = 0;
  for (auto& l : lens) max_len = std::max(max_len, l.item<int64_t>());
  auto bytes = at::zeros({max_len}, at::kInt);
  for (size_t i = 0; i < mine.size(); ++i) bytes[i] = static_cast<int>(mine[i]);
  std::vector<at::Tensor> all(n);
  for (auto& a : all) a = at::empty({max_len}, at::kInt);
  group.all_gather(all, bytes)->wait();
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
      TS_THROW(ConfigError, who, ": the model differs between ranks: entry ",
               i, " is '", x, "' on rank 0 but '", y, "' on rank ", r,
               "; every rank must build the same model before wrapping it");
    }
  }
  TS_THROW(ConfigError, who, ": model descriptions hash differently on some "
           "ranks; every rank must build the same model before wrapping it");
}

void broadcast_from_rank0(const std::vector<at::Tensor>& tensors, comm::ProcessGroup& group) {
  if (group.size() == 1 || tensors.empty()) return;
  at::NoGradGuard no_grad;
  // Small tensors travel together, one flat copy per dtype and up to kChunkBytes;
  // large contiguous ones are broadcast in place, so a big model never needs a
  // second full copy of itself just to start.
  constexpr int64_t kChunkBytes = 16 << 20;
  std::map<at::ScalarType, std::vector<at::Tensor>> pending;
  auto flush = [&group](std::vector<at::Tensor>& batch) {
    if (batch.empty()) return;
    std::vector<at::Tensor> parts;
    for (auto& t : batch) parts.push_back(t.detach().reshape({-1}));
    auto flat = at::cat(parts);
    group.broadcast(flat, 0)->wait();
    int64_t offset = 0;
    for (auto& t : batch) {
      t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
    batch.clear();
  };
  std::map<at::ScalarType, int64_t> pending_bytes;
  for (const auto& t : tensors) {
    if (t.numel() == 0) continue;
    const int64_t bytes = static_cast<int64_t>(t.nbytes());
    if (bytes >= kChunkBytes && t.is_contiguous()) {
      group.broadcast(t.detach(), 0)->wait();
      continue;
    }
    auto& batch = pending[t.scalar_type()];
    batch.push_back(t);
    if ((pending_bytes[t.scalar_type()] += bytes) >= kChunkBytes) {
      flush(batch);
      pending_bytes[t.scalar_type()] = 0;
    }
  }
  for (auto& kv : pending) flush(kv.second);
}

}  // namespace tessera::runtime
