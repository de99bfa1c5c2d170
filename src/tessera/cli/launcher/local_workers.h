// What every kind of `tessera run` does on its own node: start the local workers
// of one round, pick the port a torch.distributed program's store uses, and
// print the launcher's own lines.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/cli/launcher/launch_options.h"
#include "tessera/cli/launcher/worker_env.h"
#include "tessera/cli/launcher/worker_process.h"

namespace tessera::cli {

// Starts every local worker. If one cannot start, the ones already started are
// killed and reaped (by their destructors) before the error propagates.
std::vector<std::unique_ptr<WorkerProcess>> start_workers(const LaunchOptions& options,
                                                          const JobContext& job);

// MASTER_PORT for a torch.distributed program, whose rank 0 binds its own store
// there: the port after Tessera's store (every node computes the same), or, on
// one node with --master-port 0, another free port.
int torch_program_port(const LaunchOptions& options, int store_port);

// Writes `text` to stderr at once (the launcher's messages between workers' lines).
void print_to_stderr(const std::string& text);

// The path of the running tessera binary (agents on other hosts run the same).
std::string this_executable();

// The job token: TESSERA_JOB_TOKEN, or a fresh one when this launcher alone
// decides (one node, or the hostfile launcher). Multi-node agents need it set.
std::string job_token(const LaunchOptions& options, bool may_invent);

}  // namespace tessera::cli
