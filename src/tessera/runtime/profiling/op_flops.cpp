#include "tessera/runtime/profiling/op_flops.h"

#include <algorithm>
#include <cstring>

namespace tessera::runtime::profiling {
namespace {

double numel(const Shape& s) {
  double n = 1;
  for (int64_t d : s) n *= static_cast<double>(d);
  return n;
}

// 2·m·k·n for a [m, k] x [k, n] product; nullopt unless both are matrices that fit.
std::optional<double> mm(const Shape& a, const Shape& b) {
  if (a.size() != 2 || b.size() != 2 || a[1] != b[0]) return std::nullopt;
  return 2.0 * numel(a) * static_cast<double>(b[1]);
}

std::optional<double> bmm(const Shape& a, const Shape& b) {
  if (a.size() != 3 || b.size() != 3 || a[0] != b[0] || a[2] != b[1]) return std::nullopt;
  return 2.0 * numel(a) * static_cast<double>(b[2]);
}

// torch.matmul's rules: 1-D operands gain a unit dimension, leading (batch)
// dimensions broadcast.
std::optional<double> matmul(const Shape& a, const Shape& b) {
  if (a.empty() || b.empty()) return std::nullopt;
  const int64_t k = a.back();
  const int64_t m = a.size() >= 2 ? a[a.size() - 2] : 1;
  const int64_t kb = b.size() >= 2 ? b[b.size() - 2] : b[0];
  const int64_t n = b.size() >= 2 ? b.back() : 1;
  if (k != kb) return std::nullopt;
  const size_t ab = a.size() > 2 ? a.size() - 2 : 0, bb = b.size() > 2 ? b.size() - 2 : 0;
  double batch = 1;
  for (size_t i = 0; i < std::max(ab, bb); ++i) {
    // Aligned from the right, as broadcasting does.
    const int64_t da = i < ab ? a[ab - 1 - i] : 1, db = i < bb ? b[bb - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    batch *= static_cast<double>(std::max(da, db));
  }
  return 2.0 * batch * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
}

const char* const kOps[] = {
    "aten::linear", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
    "aten::matmul", "aten::mv", "aten::addmv", "aten::dot", "tessera::causal_attention"};

}  // namespace

bool has_flops_formula(const char* op) {
  for (const char* known : kOps) {
    if (std::strcmp(op, known) == 0) return true;
  }
  return false;
}

std::optional<double> op_flops(const std::string& op, const std::vector<Shape>& in) {
  auto arg = [&](size_t i) -> const Shape& {
    static const Shape kNone;
    return i < in.size() ? in[i] : kNone;
  };
  if (op == "aten::linear") {
    const Shape &x = arg(0), &w = arg(1);
    if (x.empty() || w.size() != 2 || x.back() != w[1]) return std::nullopt;
    return 2.0 * numel(x) * static_cast<double>(w[0]);
  }
  if (op == "aten::mm") return mm(arg(0), arg(1));
  if (op == "aten::addmm") return mm(arg(1), arg(2));
  if (op == "aten::bmm") return bmm(arg(0), arg(1));
  if (op == "aten::baddbmm") return bmm(arg(1), arg(2));
  if (op == "aten::matmul") return matmul(arg(0), arg(1));
  if (op == "aten::mv" || op == "aten::addmv") {
    const Shape &a = op == "aten::mv" ? arg(0) : arg(1), &v = op == "aten::mv" ? arg(1) : arg(2);
    if (a.size() != 2 || v.size() != 1 || a[1] != v[0]) return std::nullopt;
    return 2.0 * numel(a);
  }
  if (op == "aten::dot") {
    if (arg(0).size() != 1) return std::nullopt;
    return 2.0 * static_cast<double>(arg(0)[0]);
  }
  if (op == "tessera::causal_attention") {
    const Shape& qkv = arg(0);
    if (qkv.size() != 3 || qkv[2] % 3 != 0) return std::nullopt;
    const double B = static_cast<double>(qkv[0]), T = static_cast<double>(qkv[1]);
    return 4.0 * B * T * T * static_cast<double>(qkv[2] / 3);
  }
  return std::nullopt;
}

}  // namespace tessera::runtime::profiling
