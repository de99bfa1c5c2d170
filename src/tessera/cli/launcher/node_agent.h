// The launcher of one node of a multi-node job (`tessera run --nnodes N` or
// MIN:MAX, one per host, or started by the hostfile launcher over SSH).
//
// Each round it joins the rendezvous (rendezvous.h), learns its node rank and
// the job's node count, starts its workers with ranks node_rank * n + local, and
// watches both its workers and the other nodes. Whatever ends a round on one node
// (a worker failing, a node lost, a late node waiting, a stop signal) ends it on
// all: every agent stops its workers, and they restart together, with
// TORCHELASTIC_RESTART_COUNT / TESSERA_RESTART_COUNT set to the round, until
// --max-restarts failures have been used. A membership change does not use one.
// Node 0 also hosts the workers' store, fresh every round.
//
// Exit code: 0 when every worker of the last round exited 0; otherwise the root
// cause's code (the failing worker's exit code, 128 + its signal, 1 for a lost
// node), the same on every node; 128 + signal after a stop signal. When the job
// gives up, every agent writes the root cause to its error file (--error-file or
// TORCHELASTIC_ERROR_FILE, torchrun's layout).
#pragma once

#include "tessera/cli/launcher/launch_options.h"

namespace tessera::cli {

// Runs the job's rounds on this node until it ends; returns the exit code.
// Throws ConfigError/StoreError for problems found before any worker starts
// (a refused round, a busy port, too few nodes).
int run_node_agent(const LaunchOptions& options);

// With --agent-env-stdin: reads "NAME=value" lines from stdin up to an empty
// line (or EOF) and sets them in this process's environment.
void read_environment_from_stdin();

}  // namespace tessera::cli
