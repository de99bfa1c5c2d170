// ProcessMesh: the communication groups of a Topology for this rank, built once
// (collectively, over the world group) and then handed explicitly to the
// tensor-parallel layers, the data-parallel reducer and the pipeline.
//
//   auto mesh = ProcessMesh::build(tessera::default_group(), /*tp=*/2, /*pp=*/2);
//   ColumnParallelLinear fc(512, 2048, {mesh.tp()});
//   mesh.coord().pp;   // this rank's pipeline stage
//
// build() is a collective: every rank of `world` calls it with the same sizes,
// and each gets the groups it belongs to (tp, dp, pp, and the embedding group of
// the first and last pipeline stage; nullptr for a rank of a middle stage).
// With context parallelism (cp > 1) it also gets its cp ring and its replica
// group (dp x cp ranks, topology.h); without, cp() is nullptr and replicas()
// is the dp group. A
// layout that does not divide the world is a ConfigError (Topology) raised on
// every rank before any group is created.
#pragma once

#include <memory>

#include "tessera/comm/process_group.h"
#include "tessera/parallel/topology.h"

namespace tessera::parallel {

class ProcessMesh {
 public:
  static ProcessMesh build(std::shared_ptr<comm::ProcessGroup> world, int tp, int pp,
                           int cp = 1, int ep = 1);

  const Topology& topology() const { return topology_; }
  MeshCoord coord() const { return coord_; }
  const std::shared_ptr<comm::ProcessGroup>& world() const { return world_; }
  const std::shared_ptr<comm::ProcessGroup>& tp() const { return tp_; }
  const std::shared_ptr<comm::ProcessGroup>& dp() const { return dp_; }
  const std::shared_ptr<comm::ProcessGroup>& pp() const { return pp_; }
  const std::shared_ptr<comm::ProcessGroup>& cp() const { return cp_; }
  // The ranks holding the same parameters as this one: gradients are averaged
  // and ZeRO shards over it.
  const std::shared_ptr<comm::ProcessGroup>& replicas() const { return replicas_; }
  // Expert parallelism (topology.h): the ranks splitting the experts with this
  // one, and those holding the same experts (nullptr / replicas() at ep 1).
  const std::shared_ptr<comm::ProcessGroup>& ep() const { return ep_; }
  const std::shared_ptr<comm::ProcessGroup>& expert_dp() const { return expert_dp_; }
  // First and last pipeline stage of this rank's pipeline; nullptr on middle stages.
  const std::shared_ptr<comm::ProcessGroup>& embedding() const { return embedding_; }
  bool first_stage() const { return coord_.pp == 0; }
  bool last_stage() const { return coord_.pp == topology_.pp() - 1; }

 private:
  ProcessMesh(Topology t, MeshCoord c) : topology_(t), coord_(c) {}
  Topology topology_;
  MeshCoord coord_;
  std::shared_ptr<comm::ProcessGroup> world_, tp_, dp_, pp_, cp_, replicas_, ep_, expert_dp_,
      embedding_;
};

}  // namespace tessera::parallel
