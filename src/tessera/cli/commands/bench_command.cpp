// tessera bench: collective benchmark in the style of nccl-tests, run inside
// every worker of a job (`tessera run -n 4 tessera bench --op all_reduce`, or
// under mpirun). Rank 0 prints one table per op: size, count, median time,
// algorithm and bus bandwidth, and whether the result was correct. --compare
// measures every backend of this build on its own ProcessGroup, side by side;
// --json writes the rows for scripts. Exits non-zero when a check fails.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <utility>

#include "tessera/cli/commands/bench_sweep.h"
#include "tessera/cli/commands/command.h"
#include "tessera/cli/commands/parse_args.h"
#include "tessera/comm/backend_registry.h"
#include "tessera/comm/init.h"
#include "tessera/core/check.h"

namespace tessera::cli {
namespace {

using bench::BenchRow;
using GroupList = std::vector<std::pair<std::string, std::shared_ptr<comm::ProcessGroup>>>;

struct BenchFlags {
  std::string op = "all_reduce";
  std::string dtype = "float32";
  std::string min_bytes = "1K";
  std::string max_bytes = "32M";
  int iters = 20;
  int warmup = 5;
  std::string backend;
  bool check = true;
  bool compare = false;
  std::string json;
};

// Returns false when --help was printed.
bool parse_flags(const Args& args, BenchFlags& f) {
  CLI::App app{"tessera bench: collective benchmark (run it in every worker of a job)",
               "tessera bench"};
  app.add_option("--op", f.op,
                 "all_reduce, reduce_scatter, all_gather, broadcast, all_to_all_v or all");
  app.add_option("--dtype", f.dtype, "float32, float64, float16, bfloat16, int32 or int64");
  app.add_option("--min-bytes", f.min_bytes, "smallest size of the doubling sweep (e.g. 1K)");
  app.add_option("--max-bytes", f.max_bytes, "largest size of the doubling sweep (e.g. 32M)");
  app.add_option("--iters", f.iters, "timed iterations per size");
  app.add_option("--warmup", f.warmup, "untimed iterations per size");
  app.add_option("--backend", f.backend, "backend of the default group (default: TESSERA_BACKEND)");
  app.add_flag("--check,!--no-check", f.check, "verify every result (default on)");
  app.add_flag("--compare", f.compare, "measure every backend of this build side by side");
  app.add_option("--json", f.json, "also write the rows to this JSON file (rank 0)");
  return parse_args(app, args, "tessera bench");
}

// The groups to measure: the default one, or one per backend with --compare.
GroupList make_groups(bool compare, bool rank0) {
  auto group = default_group();
  if (!compare) return {{group->backend_name(), group}};
  GroupList groups;
  for (const auto& name : comm::available_backends()) {
    if (name == group->backend_name()) {
      groups.emplace_back(name, group);
      continue;
    }
    comm::ProcessGroupOptions opts = comm::ProcessGroupOptions::from_env("bench_" + name);
    opts.backend = name;
    opts.rendezvous_host = launch_info().master_addr;
    try {
      groups.emplace_back(name, std::make_shared<comm::ProcessGroup>(
                                    default_store(), group->rank(), group->size(), opts));
    } catch (const Error& e) {
      // Every rank fails alike here (e.g. mpi outside mpirun): skip the backend.
      if (rank0) std::printf("# skipping backend %s: %s\n", name.c_str(), e.bare_message().c_str());
    }
  }
  return groups;
}

void print_table(const GroupList& groups, const std::vector<std::vector<BenchRow>>& rows,
                 const bench::SweepOptions& o, int world_size) {
  if (groups.size() == 1) {
    std::printf("# tessera bench: op=%s backend=%s world_size=%d dtype=%s iters=%d warmup=%d\n",
                bench::to_string(o.op), groups[0].first.c_str(), world_size,
                bench::dtype_name(o.dtype), o.iters, o.warmup);
    std::printf("# %10s %12s %12s %12s %12s %6s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "check");
    for (const auto& r : rows[0]) {
      std::printf("  %10lld %12lld %12.2f %12.3f %12.3f %6s\n", static_cast<long long>(r.bytes),
                  static_cast<long long>(r.count), r.time_us, r.algbw, r.busbw, r.check.c_str());
    }
  } else {
    std::printf("# tessera bench --compare: op=%s world_size=%d dtype=%s iters=%d warmup=%d\n",
                bench::to_string(o.op), world_size, bench::dtype_name(o.dtype), o.iters,
                o.warmup);
    std::printf("# %10s %12s", "size(B)", "count");
    for (const auto& g : groups)
      std::printf(" %14s %14s", (g.first + " us").c_str(), (g.first + " GB/s").c_str());
    std::printf(" %6s\n", "check");
    for (size_t i = 0; i < rows[0].size(); ++i) {
      std::printf("  %10lld %12lld", static_cast<long long>(rows[0][i].bytes),
                  static_cast<long long>(rows[0][i].count));
      std::string check = "ok";
      for (const auto& backend_rows : rows) {
        std::printf(" %14.2f %14.3f", backend_rows[i].time_us, backend_rows[i].busbw);
        if (backend_rows[i].check != "ok") check = backend_rows[i].check == "-" ? "-" : "FAIL";
      }
      std::printf(" %6s\n", check.c_str());
    }
    std::printf("# busbw columns; nccl-tests factors (all_reduce 2(n-1)/n)\n");
  }
  std::fflush(stdout);
}

nlohmann::json to_json(const std::string& backend, const bench::SweepOptions& o,
                       const BenchRow& r) {
  return {{"op", bench::to_string(o.op)}, {"backend", backend},
          {"dtype", bench::dtype_name(o.dtype)}, {"size", r.bytes},
          {"count", r.count},  {"time_us", r.time_us},
          {"algbw_gbps", r.algbw}, {"busbw_gbps", r.busbw},
          {"check", r.check}};
}

}  // namespace

int bench_command(const Args& args) {
  BenchFlags f;
  if (!parse_flags(args, f)) return 0;
  bench::SweepOptions base;
  std::vector<bench::BenchOp> ops = bench::parse_ops(f.op);
  base.dtype = bench::parse_dtype(f.dtype);
  base.min_bytes = bench::parse_bytes(f.min_bytes);
  base.max_bytes = bench::parse_bytes(f.max_bytes);
  base.iters = f.iters;
  base.warmup = f.warmup;
  base.check = f.check;

  InitOptions init_options;
  init_options.backend = f.backend;
  init(init_options);
  bool rank0 = default_group()->rank() == 0;
  int world_size = default_group()->size();
  GroupList groups = make_groups(f.compare, rank0);

  bool all_ok = true;
  nlohmann::json json_rows = nlohmann::json::array();
  for (bench::BenchOp op : ops) {
    bench::SweepOptions o = base;
    o.op = op;
    std::vector<std::vector<BenchRow>> rows;
    for (const auto& g : groups) {
      rows.push_back(bench::run_sweep(*g.second, o));
      for (const auto& r : rows.back()) {
        all_ok = all_ok && r.check != "FAIL";
        json_rows.push_back(to_json(g.first, o, r));
      }
    }
    if (rank0) print_table(groups, rows, o, world_size);
  }
  if (rank0 && !f.json.empty()) {
    std::ofstream out(f.json);
    TS_CHECK_T(ConfigError, out.good(), "cannot write --json file '", f.json, "'");
    out << nlohmann::json{{"world_size", world_size}, {"rows", json_rows}}.dump(2) << "\n";
  }
  groups.clear();
  shutdown();
  if (!all_ok && rank0) {
    std::fprintf(stderr, "tessera bench: error: a result did not match the expected values "
                         "(rows marked FAIL)\n");
  }
  return all_ok ? 0 : 1;
}

}  // namespace tessera::cli
