// Topology: the process mesh of a parallel job as a value with named axes,
// tensor (tp), context (cp), data (dp) and pipeline (pp) parallel, in
// Megatron's rank order: tp innermost, then cp, then dp, then pp:
//
//   rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
//
// so the ranks of one tensor-parallel group are neighbours (same host, fastest
// link), a context-parallel ring the next closest, and a pipeline stage is a
// contiguous block of tp * cp * dp ranks.
//
//   Topology t(/*world=*/8, /*tp=*/2, /*pp=*/2);   // dp = 2
//   t.coord(5);          // {tp 1, dp 0, pp 1}
//   t.tp_group_of(5);    // {4, 5}
//   t.dp_group_of(5);    // {5, 7}
//   t.pp_group_of(5);    // {1, 5}
//
// The cp ranks of a data-parallel replica read the same samples (each its
// part of every sequence) and hold the same parameters: the replica group
// (replica_group_of: every rank with the same tp and pp coordinates, dp x cp
// ranks) is the one gradients are averaged and ZeRO shards over. Without cp it
// is the dp group.
//
// A layout that does not divide the world is a ConfigError naming the numbers.
// Pure values: no communication (ProcessMesh, process_mesh.h, builds the groups).
#pragma once

#include <string>
#include <vector>

namespace tessera::parallel {

struct MeshCoord {
  int tp = 0;
  int dp = 0;
  int pp = 0;
  int cp = 0;
  bool operator==(const MeshCoord& o) const {
    return tp == o.tp && dp == o.dp && pp == o.pp && cp == o.cp;
  }
};

class Topology {
 public:
  // world = tp * cp * dp * pp; dp is derived. ConfigError if tp, pp or cp < 1
  // or tp * cp * pp does not divide world.
  Topology(int world, int tp = 1, int pp = 1, int cp = 1);

  int world() const { return world_; }
  int tp() const { return tp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int cp() const { return cp_; }

  MeshCoord coord(int rank) const;
  int rank_of(const MeshCoord& c) const;

  // Every group of each axis (ranks ascending), and the one holding `rank`.
  std::vector<std::vector<int>> tp_groups() const;
  std::vector<std::vector<int>> dp_groups() const;
  std::vector<std::vector<int>> pp_groups() const;
  std::vector<std::vector<int>> cp_groups() const;
  std::vector<std::vector<int>> replica_groups() const;  // dp x cp, see above
  // The first and last stage of each pipeline (tied input/output embeddings live
  // there); a single-stage pipeline's group is that stage alone.
  std::vector<std::vector<int>> embedding_groups() const;
  std::vector<int> tp_group_of(int rank) const;
  std::vector<int> dp_group_of(int rank) const;
  std::vector<int> pp_group_of(int rank) const;
  std::vector<int> cp_group_of(int rank) const;
  std::vector<int> replica_group_of(int rank) const;
  // Expert parallelism (ep dividing dp): the ep group of `rank` is the block of
  // ep consecutive dp ranks holding it (same tp, cp, pp), which split the
  // experts between them; its expert-data-parallel group is the dp ranks with
  // the same position in their block, of every cp rank, which hold the same
  // experts.
  std::vector<int> ep_group_of(int rank, int ep) const;
  std::vector<int> expert_dp_group_of(int rank, int ep) const;
  std::vector<std::vector<int>> ep_groups(int ep) const;
  std::vector<std::vector<int>> expert_dp_groups(int ep) const;

  // "tp2 x dp2 x pp2 (8 ranks)", "tp2 x cp2 x dp1 x pp2 (8 ranks)".
  std::string describe() const;

 private:
  int world_, tp_, dp_, pp_, cp_;
};

}  // namespace tessera::parallel
