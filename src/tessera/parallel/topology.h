// Topology: the process mesh of a 3D-parallel job as a value with named axes,
// tensor (tp), data (dp) and pipeline (pp) parallel, in Megatron's rank order:
// tp innermost, then dp, then pp:
//
//   rank = tp_rank + tp * (dp_rank + dp * pp_rank)
//
// so the ranks of one tensor-parallel group are neighbours (same host, fastest
// link) and a pipeline stage is a contiguous block of tp * dp ranks.
//
//   Topology t(/*world=*/8, /*tp=*/2, /*pp=*/2);   // dp = 2
//   t.coord(5);          // {tp 1, dp 0, pp 1}
//   t.tp_group_of(5);    // {4, 5}
//   t.dp_group_of(5);    // {5, 7}
//   t.pp_group_of(5);    // {1, 5}
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
  bool operator==(const MeshCoord& o) const { return tp == o.tp && dp == o.dp && pp == o.pp; }
};

class Topology {
 public:
  // world = tp * dp * pp; dp is derived. ConfigError if tp or pp < 1 or tp * pp
  // does not divide world.
  Topology(int world, int tp = 1, int pp = 1);

  int world() const { return world_; }
  int tp() const { return tp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }

  MeshCoord coord(int rank) const;
  int rank_of(const MeshCoord& c) const;

  // Every group of each axis (ranks ascending), and the one holding `rank`.
  std::vector<std::vector<int>> tp_groups() const;
  std::vector<std::vector<int>> dp_groups() const;
  std::vector<std::vector<int>> pp_groups() const;
  // The first and last stage of each pipeline (tied input/output embeddings live
  // there); a single-stage pipeline's group is that stage alone.
  std::vector<std::vector<int>> embedding_groups() const;
  std::vector<int> tp_group_of(int rank) const;
  std::vector<int> dp_group_of(int rank) const;
  std::vector<int> pp_group_of(int rank) const;

  // "tp2 x dp2 x pp2 (8 ranks)".
  std::string describe() const;

 private:
  int world_, tp_, dp_, pp_;
};

}  // namespace tessera::parallel
