// Host identity: which ranks of a group share a host, and so can share memory.
//
// A host is identified by its hostname, the kernel's boot id
// (/proc/sys/kernel/random/boot_id) and the inode of this process's network
// namespace. The namespace is part of the identity because emulated hosts (one
// network namespace each, see scripts/netns-hosts.sh) share a kernel and a boot
// id but must behave as separate machines. Ranks learn each other's identity
// through the group's store.
//
// Thread safety: the functions are collective over the group (every rank calls
// them the same number of times, in the same order) and otherwise stateless.
#pragma once

#include <string>
#include <vector>

#include "tessera/comm/base/backend.h"

namespace tessera::comm::shm {

// This process's identity: "hostname/boot_id/netns-inode". Never throws; a part
// that cannot be read is left empty.
std::string local_host_identity();

// Collective: exchanges identities through ctx.store and returns, for every group
// rank, the index of its host (hosts numbered in order of their lowest rank, so
// rank 0 is always on host 0). StoreError if a rank does not publish in time.
std::vector<int> host_indices(const BackendContext& ctx);

// The group ranks on the same host as ctx.rank, ascending, given host_indices().
std::vector<int> ranks_on_host(const std::vector<int>& hosts, int rank);

}  // namespace tessera::comm::shm
