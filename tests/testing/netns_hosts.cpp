#include "testing/netns_hosts.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace tessera::testing {
namespace {

std::string source_dir() {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  return src ? src : ".";
}

// The client options every ssh of a test uses: the test key, no known_hosts.
const char* const kClientOptions[] = {"StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null",
                                      "LogLevel=ERROR"};

}  // namespace

std::string netns_skip_reason(bool ssh) {
  if (geteuid() != 0) return "needs root to create network namespaces";
  if (run_command("command -v ip", 5).exit_code != 0) return "needs iproute2 (ip)";
  if (ssh && (::access("/usr/sbin/sshd", X_OK) != 0 ||
              run_command("command -v ssh && command -v ssh-keygen", 5).exit_code != 0)) {
    return "needs openssh-server and openssh-client (scripts/install-deps.sh)";
  }
  return "";
}

CommandResult NetnsHosts::run(const std::string& verb) {
  return run_command("TESSERA_NETNS_PREFIX=" + prefix_ + " " + source_dir() +
                         "/scripts/netns-hosts.sh " + verb + " " + std::to_string(n_),
                     30);
}

CommandResult NetnsHosts::unplug(int host) {
  return run_command("ip -n " + prefix_ + "-sw link del v" + std::to_string(host) + " 2>&1", 10);
}

CommandResult SshHosts::start() {
  CommandResult r = up();
  if (r.exit_code != 0) return r;
  started_ = true;
  return run_command(sshd_script("start"), 60);
}

SshHosts::~SshHosts() {
  if (started_) run_command(sshd_script("stop"), 10);
}

std::string SshHosts::sshd_script(const std::string& verb) const {
  const std::string private_tmpfs =
      private_host_ >= 0 ? "TESSERA_SSHD_PRIVATE_TMPFS=" + std::to_string(private_host_) + ":" +
                               private_dir_ + " "
                         : "";
  return private_tmpfs + "TESSERA_NETNS_PREFIX=" + prefix() + " " + source_dir() +
         "/scripts/netns-sshd.sh " + verb +
         " " + dir_ + " " + std::to_string(size()) + " 2>&1";
}

std::string SshHosts::ssh_flags() const {
  std::string flags = "--ssh-option IdentityFile=" + dir_ + "/client_key";
  for (const char* opt : kClientOptions) flags += std::string(" --ssh-option ") + opt;
  return flags;
}

std::string SshHosts::ssh_to(int host) const {
  std::string cmd = "ssh -o BatchMode=yes -o IdentityFile=" + dir_ + "/client_key";
  for (const char* opt : kClientOptions) cmd += std::string(" -o ") + opt;
  return cmd + " " + address(host);
}

std::string SshHosts::write_hostfile(int hosts, int slots, const std::string& name) const {
  const std::string path = dir_ + "/" + name;
  std::ofstream out(path);
  for (int i = 0; i < hosts; ++i) out << address(i) << " slots=" << slots << "\n";
  return path;
}

}  // namespace tessera::testing
