// The hostfile launcher: `tessera run --hostfile FILE` (or -H) starts one agent
// per host over SSH, like the deepspeed launcher and horovodrun.
//
// Before anything starts it parses and narrows the host list (hostfile.h) and
// runs `ssh HOST true` on every host at once; a host that does not answer is a
// ConfigError naming it and ssh's own last line. Then, for host i, it runs
//   ssh -o BatchMode=yes [-p PORT] [-o OPT...] HOST
//       'cd CWD && exec TESSERA run --agent-env-stdin --nnodes MIN:MAX --node-rank i ...'
// (node 0 is the first host and hosts the stores; --master-addr defaults to its
// name). The job's environment travels on the agent's stdin, never on a command
// line another user could read: the job token, TESSERA_HOST_LABEL=HOST, every
// exported TESSERA_*, NCCL_*, OMP_*, GLOO_* variable, and the variables a
// .tessera_env file names (NAME=value or NAME, one per line; the file is
// TESSERA_ENV_FILE, else ./.tessera_env, else ~/.tessera_env).
//
// Agents label their workers' lines "[HOST:RANK] "; their own lines are
// relayed as "[HOST] ". SIGINT/SIGTERM close every agent's stdin: each agent
// forwards SIGTERM to its workers (which checkpoint and exit), and the launcher
// waits for them. Its exit code is node 0's agent's, or the first failing
// agent's when the job cannot go on without it.
#pragma once

#include <string>
#include <vector>

#include "tessera/cli/launcher/hostfile.h"
#include "tessera/cli/launcher/launch_options.h"

namespace tessera::cli {

// `s` quoted for a POSIX shell.
std::string shell_quote(const std::string& s);

// ssh's argv for running `remote_command` on `host`.
std::vector<std::string> ssh_command(const LaunchOptions& options, const std::string& host,
                                     const std::string& remote_command);

// The "NAME=value" entries passed to every agent (not yet the token or label):
// the prefixes above from `environment`, plus those a .tessera_env file at
// `env_file` names ("" or a missing file: none).
std::vector<std::string> forwarded_environment(const std::vector<std::string>& environment,
                                               const std::string& env_file);

// The arguments of node `node`'s agent, from "run" up to (not including) the
// program: the job's flags, with its node rank, node range and node 0's address.
std::vector<std::string> agent_arguments(const LaunchOptions& options, int node, int nproc,
                                         int min_nodes, int max_nodes,
                                         const std::string& master_addr);

// The agent command line for node `node` (shell-quoted, ready for ssh).
std::string agent_command(const LaunchOptions& options, int node, int nproc, int min_nodes,
                          int max_nodes, const std::string& master_addr, const std::string& cwd,
                          const std::string& tessera_path);

// Runs the job; returns the launcher's exit code.
int run_over_ssh(const LaunchOptions& options);

}  // namespace tessera::cli
