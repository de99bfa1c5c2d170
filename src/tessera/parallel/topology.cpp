#include "tessera/parallel/topology.h"

#include <c10/util/StringUtil.h>

#include <algorithm>

#include "tessera/core/check.h"

namespace tessera::parallel {

Topology::Topology(int world, int tp, int pp, int cp) : world_(world), tp_(tp), pp_(pp), cp_(cp) {
  TS_CHECK_T(ConfigError, world >= 1, "the world size must be >= 1, got ", world);
  TS_CHECK_T(ConfigError, tp >= 1 && pp >= 1 && cp >= 1, "tensor_model_parallel_size (", tp,
             "), pipeline_model_parallel_size (", pp, ") and context_parallel_size (", cp,
             ") must be >= 1");
  TS_CHECK_T(ConfigError, world % (tp * pp * cp) == 0, "tensor_model_parallel_size ", tp,
             " x pipeline_model_parallel_size ", pp,
             cp > 1 ? c10::str(" x context_parallel_size ", cp) : std::string(), " = ",
             tp * pp * cp, " does not divide the world size ", world,
             "; data parallel size = world / (tp x ", cp > 1 ? "cp x " : "",
             "pp) must be a whole number");
  dp_ = world / (tp * pp * cp);
}

MeshCoord Topology::coord(int rank) const {
  TS_CHECK_T(ConfigError, rank >= 0 && rank < world_, "rank ", rank, " is not in ", describe());
  MeshCoord c;
  c.tp = rank % tp_;
  c.cp = (rank / tp_) % cp_;
  c.dp = (rank / (tp_ * cp_)) % dp_;
  c.pp = rank / (tp_ * cp_ * dp_);
  return c;
}

int Topology::rank_of(const MeshCoord& c) const {
  TS_CHECK_T(ConfigError,
             c.tp >= 0 && c.tp < tp_ && c.dp >= 0 && c.dp < dp_ && c.pp >= 0 && c.pp < pp_ &&
                 c.cp >= 0 && c.cp < cp_,
             "mesh coordinate (tp ", c.tp, ", cp ", c.cp, ", dp ", c.dp, ", pp ", c.pp,
             ") is outside ", describe());
  return c.tp + tp_ * (c.cp + cp_ * (c.dp + dp_ * c.pp));
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

std::vector<int> Topology::cp_group_of(int rank) const {
  MeshCoord c = coord(rank);
  std::vector<int> g;
  for (c.cp = 0; c.cp < cp_; ++c.cp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> Topology::replica_group_of(int rank) const {
  MeshCoord c = coord(rank);
  std::vector<int> g;
  for (c.dp = 0; c.dp < dp_; ++c.dp) {
    for (c.cp = 0; c.cp < cp_; ++c.cp) g.push_back(rank_of(c));
  }
  return g;
}

namespace {
void check_ep(int dp, int ep) {
  TS_CHECK_T(ConfigError, ep >= 1 && dp % ep == 0, "expert_model_parallel_size ", ep,
             " does not divide the data parallel size ", dp,
             "; the experts are split over data-parallel ranks");
}
}  // namespace

std::vector<int> Topology::ep_group_of(int rank, int ep) const {
  check_ep(dp_, ep);
  MeshCoord c = coord(rank);
  const int first = c.dp / ep * ep;
  std::vector<int> g;
  for (c.dp = first; c.dp < first + ep; ++c.dp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> Topology::expert_dp_group_of(int rank, int ep) const {
  check_ep(dp_, ep);
  MeshCoord c = coord(rank);
  const int offset = c.dp % ep;
  // Every cp rank holds the same parameters: the group spans them too.
  std::vector<int> g;
  for (c.cp = 0; c.cp < cp_; ++c.cp) {
    for (c.dp = offset; c.dp < dp_; c.dp += ep) g.push_back(rank_of(c));
  }
  std::sort(g.begin(), g.end());
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

std::vector<std::vector<int>> Topology::cp_groups() const {
  return groups_by(world_, [this](int r) { return cp_group_of(r); });
}
std::vector<std::vector<int>> Topology::replica_groups() const {
  return groups_by(world_, [this](int r) { return replica_group_of(r); });
}

std::vector<std::vector<int>> Topology::ep_groups(int ep) const {
  return groups_by(world_, [this, ep](int r) { return ep_group_of(r, ep); });
}
std::vector<std::vector<int>> Topology::expert_dp_groups(int ep) const {
  return groups_by(world_, [this, ep](int r) { return expert_dp_group_of(r, ep); });
}

std::vector<std::vector<int>> Topology::embedding_groups() const {
  std::vector<std::vector<int>> out;
  for (const auto& g : pp_groups()) {
    out.push_back(g.size() == 1 ? std::vector<int>{g[0]} : std::vector<int>{g.front(), g.back()});
  }
  return out;
}

std::string Topology::describe() const {
  return c10::str("tp", tp_, cp_ > 1 ? c10::str(" x cp", cp_) : std::string(), " x dp", dp_,
                  " x pp", pp_, " (", world_, " ranks)");
}

}  // namespace tessera::parallel
