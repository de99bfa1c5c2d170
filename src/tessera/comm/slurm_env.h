// What Tessera reads from a Slurm job's environment.
//
// Slurm's compressed host lists ("node[01-03,07],gpu-a", as in SLURM_JOB_NODELIST
// and SLURM_STEP_NODELIST) expanded to one name per host, in Slurm's order.
//
// Grammar: comma-separated items; an item is text with any number of bracket
// groups, each a comma-separated list of numbers or ranges LO-HI. The width of LO
// is kept ("01-03" gives 01, 02, 03). Several groups multiply out left to right
// ("r[1-2]n[1-2]" gives r1n1, r1n2, r2n1, r2n2), as `scontrol show hostnames` does.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace tessera::comm {

// ConfigError naming the list and the problem (unbalanced bracket, a range
// that runs backwards, a non-number) when `list` is malformed. "" gives {}.
std::vector<std::string> expand_slurm_hostlist(const std::string& list);

// Slurm's tasks-per-node lists ("2(x3),1", as in SLURM_STEP_TASKS_PER_NODE)
// expanded to one count per node: {2, 2, 2, 1}. ConfigError when malformed.
std::vector<int> expand_slurm_tasks_per_node(const std::string& list);

// How many tasks of the current srun step run on node `node`: from
// SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE, else
// SLURM_NTASKS_PER_NODE; `fallback` when none is set.
int slurm_tasks_on_node(int node, int fallback);

// Node 0 of the current srun step: the first host of SLURM_STEP_NODELIST (else
// SLURM_JOB_NODELIST, SLURM_NODELIST); it runs task 0 under srun's default block
// distribution. "" when none is set.
std::string slurm_first_node();

// A port for the job's store, different for jobs (and steps of a job) that share
// a node: 20000 + (SLURM_JOB_ID * 64 + SLURM_STEP_ID) mod 20000. `step` < 0 reads
// SLURM_STEP_ID (0 when unset).
int slurm_store_port(int step = -1);

}  // namespace tessera::comm
