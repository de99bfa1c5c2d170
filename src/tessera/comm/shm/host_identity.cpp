#include "tessera/comm/shm/host_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>

namespace tessera::comm::shm {

std::string local_host_identity() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot_id);
  struct stat st {};
  std::string netns = stat("/proc/self/ns/net", &st) == 0 ? std::to_string(st.st_ino) : "";
  return std::string(host) + "/" + boot_id + "/" + netns;
}

std::vector<int> host_indices(const BackendContext& ctx) {
  // A generation per call keeps a later exchange in the same store namespace
  // (a group rebuilt under the same name) from reading this one's keys.
  int64_t gen = ctx.store->add("host_identity/gen/" + std::to_string(ctx.rank), 1);
  std::string prefix = "host_identity/" + std::to_string(gen) + "/";
  ctx.store->set_string(prefix + std::to_string(ctx.rank), local_host_identity());
  std::map<std::string, int> index;
  std::vector<int> hosts(ctx.size);
  for (int r = 0; r < ctx.size; ++r) {
    std::string id = ctx.store->get_string(prefix + std::to_string(r));
    auto it = index.emplace(id, static_cast<int>(index.size())).first;
    hosts[r] = it->second;
  }
  return hosts;
}

std::vector<int> ranks_on_host(const std::vector<int>& hosts, int rank) {
  std::vector<int> out;
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    if (hosts[r] == hosts[rank]) out.push_back(r);
  }
  return out;
}

}  // namespace tessera::comm::shm
