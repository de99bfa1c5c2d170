// The environment `tessera run` gives each worker: torchrun's variables, so
// programs written for torchrun run unchanged, plus Tessera's own.
//
//   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
//   ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (the port the
//   store really listens on), TORCHELASTIC_USE_AGENT_STORE=True,
//   TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
//   TESSERA_JOB_TOKEN, TESSERA_LAUNCHER=1;
//   OMP_NUM_THREADS=1 when unset and more than one worker shares the node (as
//   torchrun does: N workers each with all cores' threads thrash);
//   GLIBC_TUNABLES=kRetainMallocTunables when unset and --malloc retain (the
//   default): glibc serves every allocation from its heap (no mmap) and never
//   trims it, so a buffer freed in one step is reused by the next instead of
//   being unmapped and faulted in again page by page. Training frees and
//   reallocates the same large buffers every step (ZeRO's flat gradients, the
//   optimizer's temporaries); on a VM a first touch can cost ~12 us per 4 KB
//   page, ~47x a reused page (docs/launcher.md). The price: RSS stays at its
//   high-water mark, as with tcmalloc or jemalloc, which PyTorch's CPU launcher
//   preloads for the same reason.
// Everything else is inherited from the launcher. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "tessera/cli/launcher/launch_options.h"

namespace tessera::cli {

struct JobContext {
  std::string master_addr;  // as given on the command line
  int master_port = 0;      // the store's real port (TESSERA_STORE_PORT)
  std::string token;
  int restart_count = 0;
  // Heartbeat files (hang_watch.h): <prefix><rank>; "" when hung-worker detection is off.
  std::string heartbeat_prefix;
  double heartbeat_timeout = 0;
  // MASTER_PORT for torch.distributed programs, whose rank 0 hosts its own c10d
  // store there (TORCHELASTIC_USE_AGENT_STORE=False); 0: MASTER_PORT is the
  // Tessera store's port and the agent store is advertised.
  int torch_port = 0;
};

inline constexpr const char* kRetainMallocTunables =
    "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=18446744073709551615";

// `base` ("NAME=value" entries, normally the launcher's environ) with the worker
// variables of local rank `local_rank` set, replacing any inherited values.
std::vector<std::string> worker_environment(const LaunchOptions& options, const JobContext& job,
                                            int local_rank, const std::vector<std::string>& base);

// The launcher's own environment as "NAME=value" entries.
std::vector<std::string> current_environment();

// A fresh job token: 16 bytes from /dev/urandom as 32 hex digits. Throws Error
// when /dev/urandom cannot be read.
std::string random_job_token();

}  // namespace tessera::cli
