// Hosts of a multi-host `tessera run`: a hostfile in DeepSpeed's layout
// ("worker-1 slots=4") or Horovod's ("worker-1:4"), or horovodrun's -H list
// ("worker-1:2,worker-2:2"), narrowed by DeepSpeed's --include/--exclude
// ("worker-1:0,2@worker-2": host names, optionally with slot indices after ':',
// joined by '@'), --num-nodes and --num-procs-per-node.
//
// A '#' starts a comment; blank lines are skipped; a host listed twice is an
// error. Every mistake is a ConfigError naming the file and line, or the host.
// Pure functions on values; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace tessera::cli {

struct HostSlots {
  std::string host;
  std::vector<int> slots;  // slot indices kept (0..N-1 before --include/--exclude)
};

// Parses hostfile text; `source` names it in errors ("hosts.txt").
std::vector<HostSlots> parse_hostfile(const std::string& text, const std::string& source);
// Reads and parses a hostfile; a file that cannot be read is a ConfigError.
std::vector<HostSlots> read_hostfile(const std::string& path);
// Parses -H "host1:2,host2" (a host without ":N" has one slot).
std::vector<HostSlots> parse_host_list(const std::string& list);

struct HostSelection {
  std::string include;     // "" or DeepSpeed's "host1:0,2@host2"
  std::string exclude;     // same syntax; exclusive with include
  int num_nodes = -1;      // keep the first N hosts (-1: all)
  int procs_per_node = -1; // keep the first N slots of each host (-1: all)
};

// Applies the selection. Every host keeps the same number of slots afterwards
// (Tessera ranks are node_rank * procs + local): unequal counts are a ConfigError
// naming both hosts and the --num-procs-per-node that would even them out. An
// include/exclude naming an unknown host or slot, or leaving nothing, is an error.
std::vector<HostSlots> select_hosts(std::vector<HostSlots> hosts, const HostSelection& selection);

}  // namespace tessera::cli
