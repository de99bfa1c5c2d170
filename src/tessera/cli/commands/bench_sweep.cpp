#include "tessera/cli/commands/bench_sweep.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <numeric>

#include "tessera/core/check.h"
#include "tessera/core/timer.h"

namespace tessera::cli::bench {
namespace {

struct DtypeName {
  const char* name;
  at::ScalarType dtype;
};
const DtypeName kDtypes[] = {{"float32", at::kFloat},  {"float64", at::kDouble},
                             {"float16", at::kHalf},   {"bfloat16", at::kBFloat16},
                             {"int32", at::kInt},      {"int64", at::kLong}};
const BenchOp kOps[] = {BenchOp::kAllReduce, BenchOp::kReduceScatter, BenchOp::kAllGather,
                        BenchOp::kBroadcast};

// Rank r's input element at global position i is (r + i) % 3, so every result
// element is a small integer: sum over n ranks <= 2n, exact in bfloat16 up to
// n = 128. The result at position i depends only on i % 3.
at::Tensor rank_input(int64_t start, int64_t len, int rank, at::ScalarType dtype) {
  return at::remainder(at::arange(start, start + len, at::kLong) + rank, 3).to(dtype);
}

std::vector<double> sum_by_residue(int n) {
  std::vector<double> v(3, 0.0);
  for (int k = 0; k < 3; ++k)
    for (int r = 0; r < n; ++r) v[k] += (r + k) % 3;
  return v;
}

// True when t[j] == value[(offset + j) % 3] for every j.
bool matches_by_residue(const at::Tensor& t, int64_t offset, const std::vector<double>& value) {
  for (int k = 0; k < 3; ++k) {
    int64_t first = ((k - offset) % 3 + 3) % 3;
    if (first >= t.numel()) continue;
    auto part = t.slice(0, first, t.numel(), 3);
    if (!at::all(part == value[k]).item<bool>()) return false;
  }
  return true;
}

// One size of one op: buffers, and how to refresh, launch and verify them.
struct OpCase {
  std::function<void()> refresh;
  std::function<comm::WorkHandle()> launch;
  std::function<bool()> verify;
};

OpCase make_case(comm::ProcessGroup& g, BenchOp op, at::ScalarType dtype, int64_t count) {
  int rank = g.rank(), n = g.size();
  std::vector<int64_t> shards = comm::shard_sizes(count, n);
  int64_t offset = std::accumulate(shards.begin(), shards.begin() + rank, int64_t{0});
  OpCase c;
  switch (op) {
    case BenchOp::kAllReduce: {
      auto pristine = rank_input(0, count, rank, dtype), data = pristine.clone();
      c.refresh = [=]() mutable { data.copy_(pristine); };
      c.launch = [=, &g] { return g.all_reduce(data); };
      c.verify = [=] { return matches_by_residue(data, 0, sum_by_residue(n)); };
      break;
    }
    case BenchOp::kReduceScatter: {
      auto input = rank_input(0, count, rank, dtype), output = at::zeros({shards[rank]}, dtype);
      c.refresh = [=]() mutable { output.zero_(); };
      c.launch = [=, &g] { return g.reduce_scatter(output, input); };
      c.verify = [=] { return matches_by_residue(output, offset, sum_by_residue(n)); };
      break;
    }
    case BenchOp::kAllGather: {
      // Rank r contributes positions [offset, offset + shard) of its own pattern:
      // position i of the result then holds (owner(i) + i) % 3.
      auto input = rank_input(offset, shards[rank], rank, dtype);
      auto output = at::zeros({count}, dtype);
      c.refresh = [=]() mutable { output.zero_(); };
      c.launch = [=, &g] { return g.all_gather_into(output, input); };
      c.verify = [=] {
        int64_t start = 0;
        for (int r = 0; r < n; ++r) {
          auto part = output.narrow(0, start, shards[r]);
          if (!at::equal(part, rank_input(start, shards[r], r, dtype))) return false;
          start += shards[r];
        }
        return true;
      };
      break;
    }
    case BenchOp::kAllToAllV: {
      // Rank i sends rank j `unit` x (1 + (i + j) % n) elements: uneven splits
      // whose sum is the same on every rank.
      const int64_t units = static_cast<int64_t>(n) * (n + 1) / 2;
      const int64_t unit = std::max<int64_t>(1, count / units);
      auto share = [=](int from, int to) { return unit * (1 + (from + to) % n); };
      std::vector<int64_t> send, recv;
      for (int j = 0; j < n; ++j) {
        send.push_back(share(rank, j));
        recv.push_back(share(j, rank));
      }
      auto input = rank_input(0, unit * units, rank, dtype);
      auto output = at::zeros({unit * units}, dtype);
      c.refresh = [=]() mutable { output.zero_(); };
      c.launch = [=, &g] { return g.all_to_all(output, input, recv, send); };
      c.verify = [=] {
        int64_t at = 0;
        for (int j = 0; j < n; ++j) {
          int64_t from = 0;  // where rank j's slice for this rank starts in its input
          for (int m = 0; m < rank; ++m) from += share(j, m);
          if (!at::equal(output.narrow(0, at, recv[j]), rank_input(from, recv[j], j, dtype))) {
            return false;
          }
          at += recv[j];
        }
        return true;
      };
      break;
    }
    case BenchOp::kBroadcast: {
      auto pristine = rank_input(0, count, 1, dtype);
      auto data = rank == 0 ? pristine.clone() : at::zeros({count}, dtype);
      c.refresh = [=]() mutable {
        if (rank != 0) data.zero_();
      };
      c.launch = [=, &g] { return g.broadcast(data, 0); };
      c.verify = [=] { return at::equal(data, pristine); };
      break;
    }
  }
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

BenchRow measure(comm::ProcessGroup& g, const SweepOptions& o, int64_t count) {
  OpCase c = make_case(g, o.op, o.dtype, count);
  std::vector<double> times;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    c.refresh();
    g.barrier()->wait();
    Stopwatch watch;
    c.launch()->wait();
    double s = watch.seconds();
    if (it >= o.warmup) times.push_back(s);
  }
  // The slowest rank defines each iteration's time.
  auto slowest = at::tensor(times, at::kDouble);
  g.all_reduce(slowest, comm::ReduceOp::kMax)->wait();
  std::vector<double> max_times(slowest.data_ptr<double>(),
                                slowest.data_ptr<double>() + slowest.numel());
  BenchRow row;
  row.count = count;
  row.bytes = count * static_cast<int64_t>(c10::elementSize(o.dtype));
  double t = median(max_times);
  row.time_us = t * 1e6;
  row.algbw = t > 0 ? static_cast<double>(row.bytes) / t / 1e9 : 0;
  row.busbw = row.algbw * bus_factor(o.op, g.size());
  row.check = "-";
  if (o.check) {
    auto ok = at::full({1}, c.verify() ? 1 : 0, at::kInt);
    g.all_reduce(ok, comm::ReduceOp::kMin)->wait();
    row.check = ok.item<int>() == 1 ? "ok" : "FAIL";
  }
  return row;
}

}  // namespace

const char* to_string(BenchOp op) {
  switch (op) {
    case BenchOp::kAllReduce: return "all_reduce";
    case BenchOp::kReduceScatter: return "reduce_scatter";
    case BenchOp::kAllGather: return "all_gather";
    case BenchOp::kBroadcast: return "broadcast";
    case BenchOp::kAllToAllV: return "all_to_all_v";
  }
  return "?";
}

std::vector<BenchOp> parse_ops(const std::string& name) {
  if (name == "all") return std::vector<BenchOp>(std::begin(kOps), std::end(kOps));
  for (BenchOp op : kOps)
    if (name == to_string(op)) return {op};
  if (name == to_string(BenchOp::kAllToAllV)) return {BenchOp::kAllToAllV};
  TS_THROW(ConfigError, "unknown --op '", name,
           "': use all_reduce, reduce_scatter, all_gather, broadcast, all_to_all_v or all");
}

at::ScalarType parse_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.dtype;
  TS_THROW(ConfigError, "unknown --dtype '", name,
           "': use float32, float64, float16, bfloat16, int32 or int64");
}

const char* dtype_name(at::ScalarType dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.dtype) return d.name;
  return c10::toString(dtype);
}

int64_t parse_bytes(const std::string& text) {
  size_t pos = 0;
  long long value = -1;
  try {
    value = std::stoll(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  std::string unit = text.substr(pos);
  std::transform(unit.begin(), unit.end(), unit.begin(), ::toupper);
  int64_t mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  if (unit == "K" || unit == "KB" || unit == "KIB") mult = int64_t{1} << 10;
  if (unit == "M" || unit == "MB" || unit == "MIB") mult = int64_t{1} << 20;
  if (unit == "G" || unit == "GB" || unit == "GIB") mult = int64_t{1} << 30;
  TS_CHECK_T(ConfigError, pos > 0 && value >= 0 && mult > 0, "cannot read size '", text,
             "': use bytes with an optional K, M or G suffix (1024, 1K, 32M, 1MB)");
  return value * mult;
}

double bus_factor(BenchOp op, int n) {
  switch (op) {
    case BenchOp::kAllReduce: return 2.0 * (n - 1) / n;
    case BenchOp::kReduceScatter:
    case BenchOp::kAllGather:
    case BenchOp::kAllToAllV: return static_cast<double>(n - 1) / n;
    case BenchOp::kBroadcast: return 1.0;
  }
  return 1.0;
}

std::vector<BenchRow> run_sweep(comm::ProcessGroup& group, const SweepOptions& options) {
  TS_CHECK_T(ConfigError, options.iters >= 1 && options.warmup >= 0,
             "need --iters >= 1 and --warmup >= 0, got ", options.iters, " and ", options.warmup);
  TS_CHECK_T(ConfigError, options.min_bytes > 0 && options.min_bytes <= options.max_bytes,
             "need 0 < --min-bytes <= --max-bytes, got ", options.min_bytes, " and ",
             options.max_bytes);
  int64_t elem = static_cast<int64_t>(c10::elementSize(options.dtype));
  std::vector<BenchRow> rows;
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 2) {
    int64_t count = bytes / elem;
    if (count == 0) continue;
    rows.push_back(measure(group, options, count));
  }
  return rows;
}

}  // namespace tessera::cli::bench
