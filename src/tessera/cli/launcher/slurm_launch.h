// The Slurm launcher: `tessera run --launcher slurm` inside an allocation (an
// sbatch script or an salloc shell) starts one agent per node of the allocation
// with a single srun step:
//   srun --nodes=N --ntasks=N --ntasks-per-node=1 --kill-on-bad-exit=0
//        TESSERA run --slurm-agent --launcher slurm --nnodes MIN:N ... -- PROGRAM ARGS
// Node 0 is the first host of SLURM_JOB_NODELIST (its name is --master-addr
// unless one is given) and hosts the stores, listening on all of its addresses.
// Each agent takes its node rank from SLURM_NODEID and labels its output with
// SLURMD_NODENAME; from there on it is the multi-node agent of node_agent.h
// (coordinated restarts, elastic membership, error file). The job token is
// TESSERA_JOB_TOKEN, or a fresh one handed to the agents in srun's environment.
// Without --master-port the ports follow from SLURM_JOB_ID (comm/slurm_env.h),
// so jobs sharing a node do not collide.
//
// SIGINT/SIGTERM to the launcher go to srun, which passes SIGTERM to every agent
// (and they to their workers, which checkpoint); the exit code is srun's.
#pragma once

#include "tessera/cli/launcher/launch_options.h"

namespace tessera::cli {

// The launcher's side: ConfigError naming the variable when not inside an
// allocation; runs srun and returns the job's exit code.
int run_under_slurm(const LaunchOptions& options);

// An agent's side (--slurm-agent): `options` with its node rank, store bind
// address and host label taken from the srun task's environment.
LaunchOptions slurm_agent_options(const LaunchOptions& options);

}  // namespace tessera::cli
