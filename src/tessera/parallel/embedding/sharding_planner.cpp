#include "tessera/parallel/embedding/sharding_planner.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "tessera/core/check.h"

namespace tessera::parallel {
namespace {

// `n` split in `parts` contiguous pieces, the first n % parts one larger.
std::vector<int64_t> split_bounds(int64_t n, int parts) {
  std::vector<int64_t> bounds{0};
  for (int p = 0; p < parts; ++p) bounds.push_back(bounds.back() + n / parts + (p < n % parts));
  return bounds;
}

std::vector<int> all_ranks(int world) {
  std::vector<int> r(static_cast<size_t>(world));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

// Ranks by free budget, most first (ties: lower rank first).
std::vector<int> by_free_budget(const std::vector<int64_t>& free) {
  std::vector<int> order = all_ranks(static_cast<int>(free.size()));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return free[a] > free[b]; });
  return order;
}

bool fits(const TableSharding& s, const std::vector<int64_t>& free) {
  for (size_t r = 0; r < free.size(); ++r) {
    if (s.bytes[r] > free[r]) return false;
  }
  return true;
}

void take(const TableSharding& s, std::vector<int64_t>& free) {
  for (size_t r = 0; r < free.size(); ++r) free[r] -= s.bytes[r];
}

// The placement of an unconstrained, not data-parallel table (see the header).
TableSharding place(const EmbeddingTableConfig& t, const PlannerOptions& o,
                    const std::vector<int64_t>& free) {
  const std::vector<int> order = by_free_budget(free);
  TableSharding tw = make_table_sharding(t, ShardingType::kTableWise, {order[0]}, o.world);
  if (fits(tw, free)) return tw;
  for (int k = 2; k <= o.world && t.dim / k >= o.column_wise_min_dim; ++k) {
    std::vector<int> ranks(order.begin(), order.begin() + k);
    std::sort(ranks.begin(), ranks.end());
    TableSharding cw = make_table_sharding(t, ShardingType::kColumnWise, ranks, o.world);
    if (fits(cw, free)) return cw;
  }
  TableSharding rw = make_table_sharding(t, ShardingType::kRowWise, {}, o.world);
  TS_CHECK_T(ConfigError, fits(rw, free), "embedding table '", t.name, "' (", t.rows, " x ",
             t.dim, ", ", t.bytes(), " bytes with its optimizer state) does not fit: split "
             "row-wise it needs ", rw.bytes[0], " bytes per rank, but the ranks have at most ",
             free[order[0]], " bytes left of their ", o.budget_bytes_per_rank,
             "-byte budget; raise the budget or use more ranks");
  return rw;
}

}  // namespace

const char* to_string(ShardingType type) {
  switch (type) {
    case ShardingType::kDataParallel: return "data_parallel";
    case ShardingType::kTableWise: return "table_wise";
    case ShardingType::kRowWise: return "row_wise";
    case ShardingType::kColumnWise: return "column_wise";
  }
  return "?";
}

ShardingType parse_sharding_type(const std::string& name) {
  for (auto t : {ShardingType::kDataParallel, ShardingType::kTableWise, ShardingType::kRowWise,
                 ShardingType::kColumnWise}) {
    if (name == to_string(t)) return t;
  }
  TS_THROW(ConfigError, "unknown embedding sharding '", name,
           "': use data_parallel, table_wise, row_wise or column_wise");
}

TableSharding make_table_sharding(const EmbeddingTableConfig& table, ShardingType type,
                                  std::vector<int> ranks, int world) {
  table.validate();
  TableSharding s;
  s.table = table.name;
  s.rows = table.rows;
  s.dim = table.dim;
  s.type = type;
  s.bytes.assign(static_cast<size_t>(world), 0);
  if (type == ShardingType::kDataParallel || type == ShardingType::kRowWise || ranks.empty()) {
    ranks = type == ShardingType::kTableWise ? std::vector<int>{0} : all_ranks(world);
  }
  for (int r : ranks) {
    TS_CHECK_T(ConfigError, r >= 0 && r < world, "embedding table '", table.name,
               "': rank ", r, " is outside the world of ", world);
  }
  TS_CHECK_T(ConfigError, type != ShardingType::kTableWise || ranks.size() == 1,
             "embedding table '", table.name, "': table_wise takes exactly one rank");
  TS_CHECK_T(ConfigError, type != ShardingType::kColumnWise ||
                 static_cast<int64_t>(ranks.size()) <= table.dim,
             "embedding table '", table.name, "': ", ranks.size(),
             " column shards of a dim of ", table.dim);
  s.ranks = ranks;
  const int k = static_cast<int>(ranks.size());
  if (type == ShardingType::kRowWise) s.offsets = split_bounds(table.rows, k);
  if (type == ShardingType::kColumnWise) s.offsets = split_bounds(table.dim, k);
  if (s.offsets.empty()) s.offsets = {0, table.rows};
  for (int i = 0; i < k; ++i) {
    const int64_t n = s.offsets[i + 1] - s.offsets[i];
    int64_t bytes = table.bytes();
    if (type == ShardingType::kRowWise) bytes = n * (table.dim + 1) * 4;
    if (type == ShardingType::kColumnWise) bytes = table.rows * (n + 1) * 4;
    s.bytes[static_cast<size_t>(ranks[i])] = bytes;
  }
  return s;
}

bool TableSharding::shard_of(int rank, int64_t* row_begin, int64_t* row_end, int64_t* col_begin,
                             int64_t* col_end) const {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  if (it == ranks.end()) return false;
  const auto i = static_cast<size_t>(it - ranks.begin());
  *row_begin = 0, *row_end = rows, *col_begin = 0, *col_end = dim;
  if (type == ShardingType::kRowWise) *row_begin = offsets[i], *row_end = offsets[i + 1];
  if (type == ShardingType::kColumnWise) *col_begin = offsets[i], *col_end = offsets[i + 1];
  return true;
}

ShardingPlan plan_sharding(const std::vector<EmbeddingTableConfig>& tables,
                           const PlannerOptions& options) {
  TS_CHECK_T(ConfigError, options.world >= 1 && options.budget_bytes_per_rank > 0,
             "embedding planner: world ", options.world, " and budget ",
             options.budget_bytes_per_rank, " bytes per rank must be positive");
  ShardingPlan plan;
  plan.world = options.world;
  plan.tables.resize(tables.size());
  std::vector<int64_t> free(static_cast<size_t>(options.world), options.budget_bytes_per_rank);
  std::vector<size_t> rest;
  for (size_t i = 0; i < tables.size(); ++i) {
    const auto& t = tables[i];
    t.validate();
    auto forced = options.constraints.find(t.name);
    if (forced != options.constraints.end()) {
      std::vector<int> ranks;
      if (forced->second == ShardingType::kTableWise) ranks = {by_free_budget(free)[0]};
      if (forced->second == ShardingType::kColumnWise) {
        ranks = all_ranks(static_cast<int>(std::min<int64_t>(options.world, t.dim)));
      }
      plan.tables[i] = make_table_sharding(t, forced->second, ranks, options.world);
    } else if (t.bytes() <= options.data_parallel_max_bytes) {
      plan.tables[i] = make_table_sharding(t, ShardingType::kDataParallel, {}, options.world);
    } else {
      rest.push_back(i);
      continue;
    }
    take(plan.tables[i], free);
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [&](size_t a, size_t b) { return tables[a].bytes() > tables[b].bytes(); });
  for (size_t i : rest) {
    plan.tables[i] = place(tables[i], options, free);
    take(plan.tables[i], free);
  }
  return plan;
}

std::vector<int64_t> ShardingPlan::bytes_per_rank() const {
  std::vector<int64_t> total(static_cast<size_t>(world), 0);
  for (const auto& t : tables) {
    for (size_t r = 0; r < total.size(); ++r) total[r] += t.bytes[r];
  }
  return total;
}

std::string ShardingPlan::to_string() const {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-16s %12s %6s  %-14s %-12s %s\n", "table", "rows", "dim",
                "sharding", "ranks", "bytes per rank");
  out << line;
  for (const auto& t : tables) {
    std::string ranks, bytes;
    for (size_t i = 0; i < t.ranks.size(); ++i) {
      ranks += (i ? "," : "") + std::to_string(t.ranks[i]);
      bytes += (i ? "," : "") + std::to_string(t.bytes[static_cast<size_t>(t.ranks[i])]);
    }
    if (t.type == ShardingType::kDataParallel || t.type == ShardingType::kRowWise) {
      ranks = "all";
    }
    std::snprintf(line, sizeof(line), "%-16s %12lld %6lld  %-14s %-12s %s\n", t.table.c_str(),
                  static_cast<long long>(t.rows), static_cast<long long>(t.dim),
                  parallel::to_string(t.type), ranks.c_str(), bytes.c_str());
    out << line;
  }
  std::string totals;
  for (int64_t b : bytes_per_rank()) totals += (totals.empty() ? "" : ",") + std::to_string(b);
  out << "total bytes per rank: " << totals << "\n";
  return out.str();
}

}  // namespace tessera::parallel
