// Test helper: emulated hosts on one machine. NetnsHosts makes network
// namespaces PREFIX-h0..h{n-1} on one bridge (scripts/netns-hosts.sh; host i is
// 10.200.0.(i+1)); SshHosts also starts a real sshd (Debian's openssh-server)
// inside each, with a key made for the test (scripts/netns-sshd.sh), so
// launchers reach the hosts over SSH exactly as on a cluster, and traffic never
// leaves the namespaces.
//
// Both clean up in their destructors whatever happened (sshd stopped, namespaces
// deleted). They need root; netns_skip_reason() says why a test cannot run here.
#pragma once

#include <string>

#include "testing/subprocess.h"

namespace tessera::testing {

// Why namespace hosts (with sshd when `ssh`) cannot be made here; "" when they can.
std::string netns_skip_reason(bool ssh);

class NetnsHosts {
 public:
  NetnsHosts(std::string prefix, int n) : prefix_(std::move(prefix)), n_(n) {}
  ~NetnsHosts() { run("down"); }
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  CommandResult up() { return run("up"); }
  int size() const { return n_; }
  const std::string& prefix() const { return prefix_; }
  std::string name(int host) const { return prefix_ + "-h" + std::to_string(host); }
  static std::string address(int host) { return "10.200.0." + std::to_string(host + 1); }
  // `command` run inside host `host`'s namespace (a shell command prefix).
  std::string on(int host, const std::string& command) const {
    return "ip netns exec " + name(host) + " " + command;
  }
  // Cuts host `host` off the others: its link to the bridge is deleted.
  CommandResult unplug(int host);

 private:
  CommandResult run(const std::string& verb);
  std::string prefix_;
  int n_;
};

class SshHosts : public NetnsHosts {
 public:
  // Keys, configs and sshd logs live in `dir`, which must outlive this object.
  SshHosts(std::string prefix, int n, std::string dir)
      : NetnsHosts(std::move(prefix), n), dir_(std::move(dir)) {}
  ~SshHosts();

  // Before start(): host `host`'s sshd (and so every session on that host) sees
  // its own empty tmpfs at `dir`, as a host-local disk would be; the others see
  // the machine's `dir`, which must exist.
  void give_private_dir(int host, std::string dir) {
    private_host_ = host;
    private_dir_ = std::move(dir);
  }
  // Creates the namespaces and starts sshd on port 22 of each; the result of the
  // first step that failed (exit_code != 0), or of the last.
  CommandResult start();
  // `tessera run` flags that make its ssh use the test key and trust the hosts.
  std::string ssh_flags() const;
  // The same options as an ssh command prefix: "ssh -o ... ADDRESS".
  std::string ssh_to(int host) const;
  // Writes a hostfile of the first `hosts` hosts with `slots` each; returns its path.
  std::string write_hostfile(int hosts, int slots, const std::string& name = "hostfile") const;

 private:
  std::string sshd_script(const std::string& verb) const;
  std::string dir_;
  bool started_ = false;
  int private_host_ = -1;
  std::string private_dir_;
};

}  // namespace tessera::testing
