// Bench sweep: the measuring half of `tessera bench`, independent of its flags.
//
// run_sweep() times one collective over a doubling sweep of sizes on a
// ProcessGroup, the way nccl-tests does: for each size, `warmup` untimed runs,
// then `iters` timed runs, each after an untimed barrier and a refresh of the
// inputs. A row's time is the median over iterations of the slowest rank's time
// for that iteration. Inputs are deterministic small integers per rank, so the
// expected result is exact in every dtype; the last iteration's result is
// checked on every rank and the verdict agreed through the group.
//
// Sizes: S is the whole array in bytes (for reduce_scatter and all_gather too, as
// in nccl-tests; for all_to_all_v each rank's input); algbw = S / time; busbw =
// algbw * bus_factor().
//
// Collective over the group: every rank calls run_sweep() with the same options.
// Not thread-safe (it queues collectives in order on the group).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"

namespace tessera::cli::bench {

// kAllToAllV: an uneven all-to-all (rank i sends rank j a share proportional to
// 1 + (i + j) % n of its S bytes), the exchange expert parallelism makes; not
// part of "all".
enum class BenchOp { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kAllToAllV };

const char* to_string(BenchOp op);
// "all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all_v", or
// "all" (the first four).
// ConfigError naming the valid values otherwise.
std::vector<BenchOp> parse_ops(const std::string& name);
// "float32", "float64", "float16", "bfloat16", "int32", "int64" (ConfigError otherwise).
at::ScalarType parse_dtype(const std::string& name);
const char* dtype_name(at::ScalarType dtype);
// "1024", "1K", "32M", "1MB", "1GiB" -> bytes (binary multiples). ConfigError otherwise.
int64_t parse_bytes(const std::string& text);
// nccl-tests' bus bandwidth factor for n ranks.
double bus_factor(BenchOp op, int n);

struct SweepOptions {
  BenchOp op = BenchOp::kAllReduce;
  at::ScalarType dtype = at::kFloat;
  int64_t min_bytes = 1024;
  int64_t max_bytes = 32 << 20;
  int iters = 20;
  int warmup = 5;
  bool check = true;
};

struct BenchRow {
  int64_t bytes = 0;  // count * element size
  int64_t count = 0;  // elements of the whole array
  double time_us = 0;
  double algbw = 0;  // GB/s (1e9 bytes)
  double busbw = 0;
  std::string check;  // "ok", "FAIL" or "-" (not checked)
};

// Collective: measures every size of the sweep on `group`. Errors of the
// collectives propagate (CommError, TimeoutError).
std::vector<BenchRow> run_sweep(comm::ProcessGroup& group, const SweepOptions& options);

}  // namespace tessera::cli::bench
