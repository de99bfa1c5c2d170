#include "tessera/cli/launcher/node_agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "tessera/cli/launcher/error_file.h"
#include "tessera/cli/launcher/failure_summary.h"
#include "tessera/cli/launcher/hang_watch.h"
#include "tessera/cli/launcher/local_workers.h"
#include "tessera/cli/launcher/output_relay.h"
#include "tessera/cli/launcher/rendezvous.h"
#include "tessera/cli/launcher/supervisor.h"
#include "tessera/comm/base/tcp_store.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"

namespace tessera::cli {
namespace {

// Whether the hostfile launcher that started us is gone: its stdin pipe (the
// SSH channel) reached EOF. Without --agent-env-stdin, never.
class LauncherLink {
 public:
  explicit LauncherLink(bool watch) : watch_(watch) {
    if (watch_) fcntl(STDIN_FILENO, F_SETFL, fcntl(STDIN_FILENO, F_GETFL) | O_NONBLOCK);
  }
  bool closed() {
    if (!watch_ || closed_) return closed_;
    char buf[256];
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) closed_ = true;
    return closed_;
  }

 private:
  bool watch_;
  bool closed_ = false;
};

RendezvousSettings rendezvous_settings(const LaunchOptions& o, const std::string& token) {
  RendezvousSettings s;
  if (!o.rdzv_endpoint.empty()) {
    const auto colon = o.rdzv_endpoint.rfind(':');
    s.addr = o.rdzv_endpoint.substr(0, colon);
    s.port = std::atoi(o.rdzv_endpoint.c_str() + colon + 1);
  } else {
    TS_CHECK_T(ConfigError, o.master_port + 2 <= 65535, "--master-port ", o.master_port,
               " leaves no room for the rendezvous store at port + 2; use a lower port or "
               "--rdzv-endpoint");
    s.addr = o.master_addr;
    s.port = o.master_port + 2;
    s.bind_addr = o.store_bind_addr;
  }
  s.token = token;
  s.id = o.rdzv_id;
  s.is_host = o.node_rank == 0;
  s.min_nodes = o.min_nodes;
  s.max_nodes = o.nnodes;
  s.nproc = o.nproc_per_node;
  s.node_name = env::host_label();
  s.join_timeout = o.join_timeout;
  s.last_call = o.last_call_timeout;
  s.node_timeout = o.node_timeout;
  return s;
}

std::string error_path(const LaunchOptions& o) {
  if (!o.error_file.empty()) return o.error_file;
  const auto env_file = env::get("TORCHELASTIC_ERROR_FILE");
  return env_file ? *env_file : "";
}

}  // namespace

void read_environment_from_stdin() {
  std::string line;
  char c;
  while (true) {
    ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == '\n') {
      if (line.empty()) return;  // the blank line (or EOF) ends the block
      const auto eq = line.find('=');
      if (eq != std::string::npos && eq > 0) {
        ::setenv(line.substr(0, eq).c_str(), line.substr(eq + 1).c_str(), 1);
      }
      line.clear();
      if (n <= 0) return;
      continue;
    }
    line += c;
  }
}

int run_node_agent(const LaunchOptions& o) {
  const std::string token = job_token(o, false);
  LauncherLink launcher(o.env_from_stdin);
  Supervisor supervisor(o.grace_period);
  HangWatch hang_watch(o.heartbeat_timeout, o.stall_shutdown);
  AgentRendezvous rdzv(rendezvous_settings(o, token));
  const std::string host = env::host_label();
  const bool label_hosts = env::get("TESSERA_HOST_LABEL").has_value();

  JobContext job;
  job.master_addr = o.master_addr;
  job.master_port = o.master_port;
  job.token = token;
  job.heartbeat_prefix = hang_watch.file_prefix();
  job.heartbeat_timeout = o.heartbeat_timeout;
  job.torch_port = torch_program_port(o, o.master_port);
  std::unique_ptr<comm::TcpStoreServer> store;

  int pending_signal = 0;
  auto stop_requested = [&] {
    if (pending_signal == 0) pending_signal = supervisor.take_pending_signal();
    return pending_signal != 0 || launcher.closed();
  };
  int failures = 0;
  for (bool first = true;; first = false) {
    if (stop_requested()) return 128 + (pending_signal != 0 ? pending_signal : SIGTERM);
    if (o.node_rank == 0) {
      // A fresh workers' store every round, before the round closes: no key of
      // the last round can mislead this one, and no worker finds the old one.
      store.reset();
      store = std::make_unique<comm::TcpStoreServer>(o.bind_addr(), o.master_port, token);
    }
    const RoundPlan plan = rdzv.join(stop_requested);
    if (plan.nnodes == 0) {
      print_to_stderr("tessera run: the job finished before " + host +
                      " was admitted; nothing to do\n");
      return 0;
    }
    LaunchOptions round = o;
    round.nnodes = plan.nnodes;
    round.node_rank = plan.node_rank;
    job.restart_count = plan.round;
    std::string hosts;
    for (const auto& name : plan.node_names) hosts += (hosts.empty() ? "" : ", ") + name;
    print_to_stderr("tessera run: round " + std::to_string(plan.round) + ": " + host + " is node " +
                    std::to_string(plan.node_rank) + " of " + std::to_string(plan.nnodes) +
                    " (" + hosts + "), ranks " + std::to_string(round.global_rank(0)) + ".." +
                    std::to_string(round.global_rank(o.nproc_per_node - 1)) + " of " +
                    std::to_string(round.world_size()) + "\n");

    std::vector<int> ranks;
    for (int local = 0; local < o.nproc_per_node; ++local) ranks.push_back(round.global_rank(local));
    OutputRelay relay(ranks, o.log_dir, first);
    if (label_hosts) relay.label_with_host(host);
    hang_watch.new_round();
    bool launcher_gone = false;
    std::string store_lost;
    PeerWatch peers;
    peers.interval_seconds = o.monitor_interval;
    peers.poll = [&]() -> std::string {
      if (launcher.closed()) {
        launcher_gone = true;
        return "the hostfile launcher's connection to " + host + " closed";
      }
      try {
        RoundEnd end = rdzv.monitor();
        if (!end.ended) return "";
        // Said now, not after the teardown: this is when the job learned of it.
        print_to_stderr("tessera run: " + end.summary + "; stopping the workers on " + host + "\n");
        return end.summary;
      } catch (const std::exception& e) {
        store_lost = e.what();
        return "lost the rendezvous store: " + store_lost;
      }
    };
    auto workers = start_workers(round, job);
    RoundResult result = supervisor.supervise(workers, relay, &hang_watch, &peers);
    workers.clear();
    if (result.success) {
      try {
        rdzv.finish();
      } catch (const std::exception&) {
        // Node 0 finished and took the store down first: nothing is left to report to.
      }
      return 0;
    }
    // (A stop because of another node was announced when it happened.)
    if (result.first_failure >= 0 || result.launcher_signal != 0) {
      print_to_stderr(format_failure_summary(result, relay));
    }
    TS_CHECK_T(StoreError, store_lost.empty(), "tessera run on ", host,
               ": lost contact with node 0's rendezvous store (", store_lost,
               "); node 0 or the link to it is gone");

    RoundEnd mine;
    const int sig = result.launcher_signal != 0 ? result.launcher_signal
                    : launcher_gone             ? SIGTERM
                                                : 0;
    if (sig != 0) {
      mine.final = true;
      mine.exit_code = 128 + sig;
      mine.summary = "the launcher on " + host + " received " + signal_name(sig) + "; the job stops";
      mine.error_json = error_file_json(result, relay, failures);
    } else if (result.first_failure >= 0) {
      const WorkerReport& w = result.workers[static_cast<size_t>(result.first_failure)];
      mine.exit_code = round_exit_code(result);
      mine.summary = "rank " + std::to_string(w.rank) + " on " + host + " " + describe_exit(w);
      mine.error_json = error_file_json(result, relay, failures);
    }
    RoundEnd end;
    try {
      end = rdzv.end_round(mine);  // the first end of this round wins, for everyone
    } catch (const std::exception& e) {
      print_to_stderr(std::string("tessera run: cannot reach the rendezvous store: ") + e.what() +
                      "\n");
      write_error_text(error_path(o), mine.error_json);
      return sig != 0 ? 128 + sig : round_exit_code(result);
    }
    if (end.counts) ++failures;
    if (end.final || failures > o.max_restarts) {
      print_to_stderr("tessera run: the job ends: " + end.summary +
                      (end.final ? "" : " (restarts used: " + std::to_string(failures - 1) + " of " +
                                            std::to_string(o.max_restarts) + ")") +
                      "\n");
      write_error_text(error_path(o), end.error_json.empty() ? mine.error_json : end.error_json);
      return sig != 0 ? 128 + sig : end.exit_code;
    }
    print_to_stderr("tessera run: " + end.summary + "; restarting all workers" +
                    (end.counts ? " (restart " + std::to_string(failures) + " of " +
                                      std::to_string(o.max_restarts) + ")"
                                : "") +
                    "\n");
  }
}

}  // namespace tessera::cli
