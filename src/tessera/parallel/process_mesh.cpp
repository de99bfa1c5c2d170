#include "tessera/parallel/process_mesh.h"

#include "tessera/core/check.h"

namespace tessera::parallel {

namespace {

// Every rank creates every group of an axis in the same order (new_subgroup is a
// collective over the world) and keeps the one it is in.
std::shared_ptr<comm::ProcessGroup> mine(comm::ProcessGroup& world,
                                         const std::vector<std::vector<int>>& groups) {
  std::shared_ptr<comm::ProcessGroup> out;
  for (const auto& g : groups) {
    auto pg = world.new_subgroup(g);
    if (pg) out = pg;
  }
  return out;
}

}  // namespace

ProcessMesh ProcessMesh::build(std::shared_ptr<comm::ProcessGroup> world, int tp, int pp,
                               int cp, int ep) {
  TS_CHECK(world != nullptr, "ProcessMesh::build: no world group; call tessera::init() first");
  Topology t(world->size(), tp, pp, cp);
  ProcessMesh m(t, t.coord(world->rank()));
  m.world_ = world;
  m.tp_ = mine(*world, t.tp_groups());
  m.dp_ = mine(*world, t.dp_groups());
  m.pp_ = mine(*world, t.pp_groups());
  m.embedding_ = mine(*world, t.embedding_groups());
  if (cp > 1) {
    m.cp_ = mine(*world, t.cp_groups());
    m.replicas_ = mine(*world, t.replica_groups());
  } else {
    m.replicas_ = m.dp_;
  }
  if (ep > 1) {
    m.ep_ = mine(*world, t.ep_groups(ep));
    m.expert_dp_ = mine(*world, t.expert_dp_groups(ep));
  } else {
    t.ep_group_of(world->rank(), ep);  // ConfigError for a bad ep, on every rank
    m.expert_dp_ = m.replicas_;
  }
  TS_INTERNAL_ASSERT(m.tp_ && m.dp_ && m.pp_, "ProcessMesh: a rank is missing from an axis");
  return m;
}

}  // namespace tessera::parallel
