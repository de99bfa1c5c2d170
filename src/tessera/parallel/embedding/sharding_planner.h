// ShardingPlan: where each embedding table lives, chosen from every rank's memory
// budget (TorchRec's planner, reduced to a greedy rule that can be read in one go).
//
//   data_parallel  every rank holds the whole table; gradients are all-reduced.
//   table_wise     one rank holds the whole table; ids go to it, pooled rows come back.
//   row_wise       rows split in contiguous blocks over every rank; each rank pools
//                  the ids it owns and the partial sums are reduce-scattered.
//   column_wise    the dim split over `ranks`; each pools its columns for every id.
//
// plan_sharding() decides, in this order: a table whose bytes (weights plus the
// row-wise Adagrad accumulator) are at most `data_parallel_max_bytes` is
// data-parallel; the other tables, largest first, go table-wise to the rank with
// the most free budget (so tables balance by bytes) when they fit there; a table
// that fits no single rank is split column-wise over the fewest ranks that hold it
// when its dim allows shards of at least `column_wise_min_dim` columns, otherwise
// row-wise over all ranks. A table that cannot fit at all is a ConfigError naming
// it and the bytes. `constraints` force a table's sharding (tests, benchmarks).
// Pure functions; no communication.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/parallel/embedding/embedding_types.h"

namespace tessera::parallel {

enum class ShardingType { kDataParallel, kTableWise, kRowWise, kColumnWise };

const char* to_string(ShardingType type);
// "data_parallel", "table_wise", "row_wise", "column_wise"; ConfigError otherwise.
ShardingType parse_sharding_type(const std::string& name);

struct TableSharding {
  std::string table;
  int64_t rows = 0;
  int64_t dim = 0;
  ShardingType type = ShardingType::kTableWise;
  std::vector<int> ranks;          // holders, in shard order
  std::vector<int64_t> offsets;    // row_wise: row bounds, column_wise: column bounds
                                   // (ranks.size() + 1 entries); else {0, rows}
  std::vector<int64_t> bytes;      // per rank of the world (0 where nothing is held)
  // The shard `rank` holds: [row_begin, row_end) x [col_begin, col_end); false if none.
  bool shard_of(int rank, int64_t* row_begin, int64_t* row_end, int64_t* col_begin,
                int64_t* col_end) const;
};

struct ShardingPlan {
  int world = 1;
  std::vector<TableSharding> tables;  // in the order of the table configs
  // One line per table: name, rows, dim, sharding, ranks, bytes on each holder;
  // then the total bytes per rank.
  std::string to_string() const;
  std::vector<int64_t> bytes_per_rank() const;
};

struct PlannerOptions {
  int world = 1;
  int64_t budget_bytes_per_rank = int64_t{1} << 30;
  int64_t data_parallel_max_bytes = int64_t{64} << 10;
  int64_t column_wise_min_dim = 128;
  std::map<std::string, ShardingType> constraints;  // table name -> forced sharding
};

ShardingPlan plan_sharding(const std::vector<EmbeddingTableConfig>& tables,
                           const PlannerOptions& options);

// The plan for one forced sharding of one table over `ranks` (column_wise and
// table_wise use them; data_parallel and row_wise always take every rank).
TableSharding make_table_sharding(const EmbeddingTableConfig& table, ShardingType type,
                                  std::vector<int> ranks, int world);

}  // namespace tessera::parallel
