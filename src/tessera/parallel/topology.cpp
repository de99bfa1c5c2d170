#include "tessera/parallel/topology.h"

#include <c10/util/StringUtil.h>

#include "tessera/core/check.h"

namespace tessera::parallel {

Topology::Topology(int world, int tp, int pp) : world_(world), tp_(tp), pp_(pp) {
  TS_CHECK_T(ConfigError, world >= 1, "the world size must be >= 1, got ", world);
  TS_CHECK_T(ConfigError, tp >= 1 && pp >= 1, "tensor_model_parallel_size (", tp,
             ") and pipeline_model_parallel_size (", pp, ") must be >= 1");
  TS_CHECK_T(ConfigError, world % (tp * pp) == 0, "tensor_model_parallel_size ", tp,
             " x pipeline_model_parallel_size ", pp, " = ", tp * pp,
             " does not divide the world size ", world,
             "; data parallel size = world / (tp x pp) must be a whole number");
  dp_ = world / (tp * pp);
}

MeshCoord Topology::coord(int rank) const {
  TS_CHECK_T(ConfigError, rank >= 0 && rank < world_, "rank ", rank, " is not in ", describe());
  return {rank % tp_, (rank / tp_) % dp_, rank / (tp_ * dp_)};
}

int Topology::rank_of(const MeshCoord& c) const {
  TS_CHECK_T(ConfigError, c.tp >= 0 && c.tp < tp_ && c.dp >= 0 && c.dp < dp_ && c.pp >= 0 && c.pp < pp_,
             "mesh coordinate (tp ", c.tp, ", dp ", c.dp, ", pp ", c.pp, ") is outside ", describe());
  return c.tp + tp_ * (c.dp + dp_ * c.pp);
}

std::vector<int> Topology::tp_group_of(int rank) const {
  MeshCoord c = coord(rank);
  std::vector<int> g;
  for (c.tp = 0; c.tp < tp_; ++c.tp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> Topology::dp_group_of(int rank) const {
  MeshCoord c = coord(rank);
  std::vector<int> g;
  for (c.dp = 0; c.dp < dp_; ++c.dp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> Topology::pp_group_of(int rank) const {
  MeshCoord c = coord(rank);
  std::vector<int> g;
  for (c.pp = 0; c.pp < pp_; ++c.pp) g.push_back(rank_of(c));
  return g;
}

namespace {
// Each axis's groups, in the order of their smallest rank.
template <typename Of>
std::vector<std::vector<int>> groups_by(int world, Of of) {
  std::vector<std::vector<int>> out;
  std::vector<bool> seen(world, false);
  for (int r = 0; r < world; ++r) {
    if (seen[r]) continue;
    auto g = of(r);
    for (int x : g) seen[x] = true;
    out.push_back(std::move(g));
  }
  return out;
}
}  // namespace

std::vector<std::vector<int>> Topology::tp_groups() const {
  return groups_by(world_, [this](int r) { return tp_group_of(r); });
}
std::vector<std::vector<int>> Topology::dp_groups() const {
  return groups_by(world_, [this](int r) { return dp_group_of(r); });
}
std::vector<std::vector<int>> Topology::pp_groups() const {
  return groups_by(world_, [this](int r) { return pp_group_of(r); });
}

std::vector<std::vector<int>> Topology::embedding_groups() const {
  std::vector<std::vector<int>> out;
  for (const auto& g : pp_groups()) {
    out.push_back(g.size() == 1 ? std::vector<int>{g[0]} : std::vector<int>{g.front(), g.back()});
  }
  return out;
}

std::string Topology::describe() const {
  return c10::str("tp", tp_, " x dp", dp_, " x pp", pp_, " (", world_, " ranks)");
}

}  // namespace tessera::parallel
