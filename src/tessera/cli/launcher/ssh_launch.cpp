#include "tessera/cli/launcher/ssh_launch.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "tessera/cli/launcher/failure_summary.h"
#include "tessera/cli/launcher/local_workers.h"
#include "tessera/cli/launcher/output_relay.h"
#include "tessera/cli/launcher/supervisor.h"
#include "tessera/cli/launcher/worker_env.h"
#include "tessera/cli/launcher/worker_process.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"

namespace tessera::cli {
namespace {

constexpr const char* kForwardedPrefixes[] = {"TESSERA_", "NCCL_", "OMP_", "GLOO_"};
constexpr int kReachTimeoutSeconds = 10;

std::string current_directory() {
  char buf[PATH_MAX];
  TS_CHECK(::getcwd(buf, sizeof(buf)) != nullptr, "cannot read the current directory");
  return buf;
}

std::string env_file_path() {
  if (auto f = env::get("TESSERA_ENV_FILE")) return *f;
  if (::access(".tessera_env", R_OK) == 0) return ".tessera_env";
  if (const char* home = std::getenv("HOME")) {
    const std::string p = std::string(home) + "/.tessera_env";
    if (::access(p.c_str(), R_OK) == 0) return p;
  }
  return "";
}

// Every host answers `ssh HOST true` (run at once on all); otherwise a
// ConfigError naming each host that did not and why.
void check_reachable(const LaunchOptions& o, const std::vector<HostSlots>& hosts) {
  std::vector<FILE*> probes;
  for (const auto& h : hosts) {
    std::string cmd;
    for (const auto& arg : ssh_command(o, h.host, "true")) cmd += shell_quote(arg) + " ";
    probes.push_back(::popen((cmd + "</dev/null 2>&1").c_str(), "r"));
  }
  std::string failures;
  for (size_t i = 0; i < hosts.size(); ++i) {
    std::string output, last;
    if (probes[i] == nullptr) {
      failures += "\n  " + hosts[i].host + ": cannot run ssh";
      continue;
    }
    char buf[512];
    while (std::fgets(buf, sizeof(buf), probes[i]) != nullptr) output += buf;
    const int status = ::pclose(probes[i]);
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) last = line;
    }
    if (status != 0) {
      failures += "\n  " + hosts[i].host + ": " + (last.empty() ? "ssh failed" : last);
    }
  }
  TS_CHECK_T(ConfigError, failures.empty(), "cannot reach every host over ssh (BatchMode: a key, "
             "no password prompt) before starting the job:", failures,
             "\n(check the host names, that sshd runs there, and --ssh-port/--ssh-option)");
}

std::string agent_stdin(const std::vector<std::string>& env) {
  std::string text;
  for (const auto& entry : env) {
    if (entry.find('\n') != std::string::npos) continue;  // cannot travel as one line
    text += entry + "\n";
  }
  return text + "\n";
}

}  // namespace

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-.,/:=@+%") == std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::string> ssh_command(const LaunchOptions& o, const std::string& host,
                                     const std::string& remote_command) {
  // ServerAlive: a host whose link is gone ends its ssh in about 15 s instead of
  // leaving it waiting on TCP for minutes.
  std::vector<std::string> argv = {"ssh",
                                   "-o",
                                   "BatchMode=yes",
                                   "-o",
                                   "ConnectTimeout=" + std::to_string(kReachTimeoutSeconds),
                                   "-o",
                                   "ServerAliveInterval=5",
                                   "-o",
                                   "ServerAliveCountMax=3"};
  if (o.ssh_port > 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(o.ssh_port));
  }
  for (const auto& opt : o.ssh_options) {
    argv.push_back("-o");
    argv.push_back(opt);
  }
  argv.push_back(host);
  argv.push_back(remote_command);
  return argv;
}

std::vector<std::string> forwarded_environment(const std::vector<std::string>& environment,
                                               const std::string& env_file) {
  std::map<std::string, std::string> vars;
  std::map<std::string, std::string> current;
  for (const auto& entry : environment) {
    const auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = entry.substr(0, eq);
    current[name] = entry.substr(eq + 1);
    for (const char* prefix : kForwardedPrefixes) {
      if (name.rfind(prefix, 0) == 0) vars[name] = current[name];
    }
  }
  if (!env_file.empty()) {
    std::ifstream in(env_file);
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      line = line.substr(0, line.find('#'));
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      size_t b = line.find_first_not_of(" \t");
      if (b == std::string::npos) continue;
      line = line.substr(b);
      if (line.rfind("export ", 0) == 0) line = line.substr(7);
      const auto eq = line.find('=');
      const std::string name = line.substr(0, eq);
      TS_CHECK_T(ConfigError, !name.empty() && name.find_first_of(" \t") == std::string::npos,
                 env_file, ":", line_no, ": expected NAME or NAME=value, got '", line, "'");
      if (eq != std::string::npos) {
        vars[name] = line.substr(eq + 1);
      } else if (current.count(name) != 0) {
        vars[name] = current[name];
      }
    }
  }
  std::vector<std::string> out;
  for (const auto& [name, value] : vars) out.push_back(name + "=" + value);
  return out;
}

std::vector<std::string> agent_arguments(const LaunchOptions& o, int node, int nproc,
                                         int min_nodes, int max_nodes,
                                         const std::string& master_addr) {
  std::vector<std::string> args = {
      "run",
      "--nnodes", std::to_string(min_nodes) + ":" + std::to_string(max_nodes),
      "--node-rank", std::to_string(node),
      "-n", std::to_string(nproc),
      "--master-addr", master_addr,
      "--master-port", std::to_string(o.master_port),
      "--max-restarts", std::to_string(o.max_restarts),
      "--grace-period", std::to_string(o.grace_period),
      "--run-id", o.run_id,
      "--heartbeat-timeout", std::to_string(o.heartbeat_timeout),
      "--stall-shutdown", std::to_string(o.stall_shutdown),
      "--malloc", o.malloc_retain ? "retain" : "system",
      "--rdzv-id", o.rdzv_id,
      "--monitor-interval", std::to_string(o.monitor_interval),
      "--join-timeout", std::to_string(o.join_timeout),
      "--last-call-timeout", std::to_string(o.last_call_timeout),
      "--node-timeout", std::to_string(o.node_timeout)};
  if (!o.rdzv_endpoint.empty()) args.insert(args.end(), {"--rdzv-endpoint", o.rdzv_endpoint});
  if (!o.log_dir.empty()) args.insert(args.end(), {"--log-dir", o.log_dir});
  if (!o.error_file.empty()) args.insert(args.end(), {"--error-file", o.error_file});
  return args;
}

std::string agent_command(const LaunchOptions& o, int node, int nproc, int min_nodes,
                          int max_nodes, const std::string& master_addr, const std::string& cwd,
                          const std::string& tessera_path) {
  std::vector<std::string> args = agent_arguments(o, node, nproc, min_nodes, max_nodes, master_addr);
  args.insert(args.begin() + 1, "--agent-env-stdin");
  args.insert(args.begin(), tessera_path);
  args.push_back("--");
  args.insert(args.end(), o.program.begin(), o.program.end());
  std::string cmd = "cd " + shell_quote(cwd) + " && exec";
  for (const auto& a : args) cmd += " " + shell_quote(a);
  return cmd;
}

int run_over_ssh(const LaunchOptions& o) {
  const std::vector<HostSlots> hosts = select_hosts(
      o.hostfile.empty() ? parse_host_list(o.host_list) : read_hostfile(o.hostfile), o.selection);
  const int max_nodes = static_cast<int>(hosts.size());
  TS_CHECK_T(ConfigError, !o.nnodes_given || o.nnodes == max_nodes, "--nnodes ", o.min_nodes, ":",
             o.nnodes, " does not match the ", max_nodes,
             " hosts selected; with a hostfile, MAX is the number of hosts");
  const int min_nodes = o.nnodes_given ? o.min_nodes : max_nodes;
  TS_CHECK_T(ConfigError, o.master_port != 0,
             "--master-port 0 does not work across hosts; pass a port free on the first host");
  const int nproc = static_cast<int>(hosts.front().slots.size());
  const std::string master_addr = o.master_addr != "127.0.0.1" ? o.master_addr : hosts[0].host;
  check_reachable(o, hosts);

  const std::string token = job_token(o, true);
  const std::vector<std::string> env_base = forwarded_environment(current_environment(),
                                                                  env_file_path());
  const std::string cwd = current_directory();
  const std::string self = this_executable();

  Supervisor supervisor(o.grace_period * 2 + 10);
  // Closing an agent's stdin asks it to stop its workers (with SIGTERM, so they
  // can checkpoint); its ssh exits once it has.
  supervisor.set_stop_action([](WorkerProcess& agent, int) { agent.close_stdin(); });
  supervisor.set_failures_tolerated(max_nodes - min_nodes);
  std::vector<std::unique_ptr<WorkerProcess>> agents;
  std::vector<std::string> names;
  std::vector<int> ids;
  for (int node = 0; node < max_nodes; ++node) {
    const std::string& host = hosts[static_cast<size_t>(node)].host;
    std::vector<std::string> env = env_base;
    env.push_back("TESSERA_JOB_TOKEN=" + token);
    env.push_back("TESSERA_HOST_LABEL=" + host);
    WorkerSpec spec;
    spec.rank = node;
    spec.local_rank = node;
    spec.argv = ssh_command(o, host,
                            agent_command(o, node, nproc, min_nodes, max_nodes, master_addr, cwd,
                                          self));
    spec.env = current_environment();
    spec.stdin_pipe = true;
    spec.stdin_text = agent_stdin(env);
    agents.push_back(std::make_unique<WorkerProcess>(spec));
    names.push_back(host);
    ids.push_back(node);
  }
  OutputRelay relay(ids, "");
  relay.pass_through_hosts(names);
  // Node 0's agent decides the job: once it has exited, agents still running
  // (a host that lost its link and has not noticed yet) are stopped.
  PeerWatch node0_done;
  node0_done.poll = [&]() -> std::string {
    return agents.front()->running() ? "" : "the agent on " + names.front() + " (node 0) exited";
  };
  RoundResult result = supervisor.supervise(agents, relay, nullptr, &node0_done);
  if (result.launcher_signal != 0) return 128 + result.launcher_signal;
  const WorkerReport& node0 = result.workers.front();
  int code = node0.term_signal != 0 ? 128 + node0.term_signal : node0.exit_code;
  if (result.first_failure >= 0) {
    const WorkerReport& w = result.workers[static_cast<size_t>(result.first_failure)];
    code = w.term_signal != 0 ? 128 + w.term_signal : w.exit_code;
  }
  for (const auto& w : result.workers) {
    if (w.exit_code != 0 || w.term_signal != 0) {
      print_to_stderr("tessera run: the agent on " + names[static_cast<size_t>(w.rank)] + " " +
                      describe_exit(w) + (w.stopped_by_launcher ? " (stopped by the launcher)" : "") +
                      "\n");
    }
  }
  return code;
}

}  // namespace tessera::cli
