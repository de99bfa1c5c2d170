// AgentRendezvous: how the launchers ("agents") of a multi-node `tessera run`
// agree on each round of workers, with torchrun's elastic semantics.
//
// Node 0's agent (--node-rank 0) hosts the rendezvous store (--rdzv-endpoint, by
// default --master-addr at --master-port + 2) for the whole job; every agent is a
// client of it, authenticated with the job token. Keys live under the
// rendezvous id, so two jobs sharing a store never meet.
//
// A round: every other agent takes an arrival number (its node rank in that
// round, in order of arrival) and publishes its host name and -n. Node 0 closes
// the round when MAX nodes have arrived, or when at least MIN have and the last
// call has passed since MIN was reached, or (after the first round) as soon as
// every agent it expects back has arrived: the last round's members not
// declared lost, and those that waited to be admitted. Fewer than MIN after the
// join timeout is an error. Node 0 checks that every member runs the same number of workers and
// refuses the round (all agents exit, naming the host) when one does not. An
// agent that arrives after the close waits; it is admitted at the next round,
// and node 0 ends a running round for it when the job is below MAX (a membership
// change, which does not count as a restart).
//
// While a round runs, each agent calls monitor() every --monitor-interval: it
// bumps its heartbeat counter; node 0 also declares dead a member whose counter
// has not moved for --node-timeout seconds (its own clock, so hosts' clocks need
// not agree) and ends the round. Any agent whose worker fails ends the round with
// the root cause; the first end_round() wins, and every agent reads the same
// RoundEnd, so all stop their workers, and all restart or all give up together.
//
// Ownership: node 0 owns the store server; it lives as long as this object.
// Thread safety: none; one agent thread drives it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/base/tcp_store.h"
#include "tessera/core/timer.h"

namespace tessera::cli {

struct RendezvousSettings {
  std::string addr;        // the store's address
  std::string bind_addr;   // where node 0's store listens; empty: addr
  int port = 0;
  std::string token;       // the job token
  std::string id = "none"; // --rdzv-id
  bool is_host = false;    // node 0: hosts the store and decides each round
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc = 1;           // this node's workers
  std::string node_name;   // for messages: the hostfile name or the host name
  double join_timeout = 600;
  double last_call = 30;
  double node_timeout = 30;  // heartbeat silence after which a node is declared lost
};

struct RoundPlan {
  int round = 0;
  int node_rank = 0;
  int nnodes = 1;                        // 0: the job finished without this node
  std::vector<std::string> node_names;  // by node rank
};

// Why a round ended, the same for every agent.
struct RoundEnd {
  bool ended = false;
  bool final = false;        // nobody restarts (a stop signal, a refused round)
  bool counts = true;        // uses up one --max-restarts (a membership change does not)
  int exit_code = 1;         // what the job exits with if it gives up now
  std::string summary;       // one line: what happened, naming host and rank
  std::string error_json;    // torchrun error-file body of the root cause ("" if none)
};

class AgentRendezvous {
 public:
  // Node 0 binds the store here (StoreError naming host:port when it cannot);
  // the others connect, retrying up to the join timeout.
  explicit AgentRendezvous(const RendezvousSettings& settings);
  ~AgentRendezvous();

  // Joins the next round and blocks until it closes with this node in it, or
  // (nnodes 0 in the plan) the job finished while this node waited to be admitted.
  // `stop` is polled while waiting: when it returns true, join throws Error.
  // Throws ConfigError when node 0 refused the round, StoreError/Error when
  // fewer than MIN nodes joined in time or the store went away.
  RoundPlan join(const std::function<bool()>& stop);

  // One tick of the running round: this node's heartbeat, and on node 0 the
  // liveness and late-joiner checks. Returns the round's end once someone ended it.
  RoundEnd monitor();

  // Ends the current round (if nobody did first) and returns the end that won.
  RoundEnd end_round(const RoundEnd& end);

  // This node's workers all exited 0. Node 0 then waits (at most the node
  // timeout) for the others to finish too before taking the store down.
  void finish();

  const RendezvousSettings& settings() const { return settings_; }

 private:
  std::string key(const std::string& name) const;
  std::string round_key(const std::string& name) const;
  RoundPlan host_close(const std::function<bool()>& stop);
  RoundEnd read_end();

  RendezvousSettings settings_;
  std::unique_ptr<comm::TcpStoreServer> server_;
  std::unique_ptr<comm::TcpStore> store_;
  RoundPlan plan_;
  int round_ = -1;
  // Node 0: members of the current round it declared lost (not expected back).
  int lost_ = 0;
  // Node 0: each member's last heartbeat value and when it last changed.
  std::map<int, std::pair<int64_t, Stopwatch>> beats_;
};

}  // namespace tessera::cli
